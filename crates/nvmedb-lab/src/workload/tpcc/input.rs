//! What a TPC-C terminal submits: the transaction mix through a deck (§5.2.4) and each
//! transaction's input data (§2.4.1, §2.5.1, §2.6.1, §2.7.1, §2.8.1), with zero keying and
//! think time.
//!
//! Owns: [`TxnKind`], [`Deck`], the input types and [`Terminal`]. Invariants: every 100
//! transactions a terminal deals are exactly 45 New-Order, 43 Payment, 4 Order-Status,
//! 4 Delivery and 4 Stock-Level, in a shuffled order; 1 % of New-Orders end with an unused item
//! id (they roll back); an order line is supplied by a remote warehouse with probability 1 %,
//! a Payment is for a remote customer with probability 15 % (both only with more than one
//! warehouse); 60 % of Payments and Order-Status select the customer by last name.

use super::random::{last_name, NuConstants, TpccRng};
use super::schema::Scale;
use serde::{Deserialize, Serialize};

/// The five transaction types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TxnKind {
    /// New-Order (§2.4).
    NewOrder,
    /// Payment (§2.5).
    Payment,
    /// Order-Status (§2.6).
    OrderStatus,
    /// Delivery (§2.7).
    Delivery,
    /// Stock-Level (§2.8).
    StockLevel,
}

impl TxnKind {
    /// Every type, in index order.
    pub const ALL: [TxnKind; 5] =
        [TxnKind::NewOrder, TxnKind::Payment, TxnKind::OrderStatus, TxnKind::Delivery, TxnKind::StockLevel];

    /// Dense index in `0..5`.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The specification's name.
    pub fn name(self) -> &'static str {
        match self {
            TxnKind::NewOrder => "New-Order",
            TxnKind::Payment => "Payment",
            TxnKind::OrderStatus => "Order-Status",
            TxnKind::Delivery => "Delivery",
            TxnKind::StockLevel => "Stock-Level",
        }
    }

    /// Cards of this type in a deck of 100 (the minimum mix of §5.2.3, with New-Order taking
    /// the rest).
    pub fn cards(self) -> usize {
        match self {
            TxnKind::NewOrder => 45,
            TxnKind::Payment => 43,
            TxnKind::OrderStatus | TxnKind::Delivery | TxnKind::StockLevel => 4,
        }
    }
}

/// A deck of 100 cards in the 45/43/4/4/4 mix, reshuffled after every pass (§5.2.4.2).
#[derive(Debug, Clone)]
pub struct Deck {
    cards: Vec<TxnKind>,
    next: usize,
}

impl Default for Deck {
    fn default() -> Self {
        let cards = TxnKind::ALL.iter().flat_map(|&k| std::iter::repeat_n(k, k.cards())).collect::<Vec<_>>();
        debug_assert_eq!(cards.len(), 100);
        let next = cards.len();
        Self { cards, next }
    }
}

impl Deck {
    /// The next card; a new pass starts with a shuffle.
    pub fn deal(&mut self, rng: &mut TpccRng) -> TxnKind {
        if self.next == self.cards.len() {
            for i in (1..self.cards.len()).rev() {
                self.cards.swap(i, rng.below(i as u64 + 1) as usize);
            }
            self.next = 0;
        }
        self.next += 1;
        self.cards[self.next - 1]
    }
}

/// How Payment and Order-Status pick their customer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CustomerBy {
    /// By C_ID.
    Id(u32),
    /// By C_LAST: the middle one, in C_FIRST order, of the customers with that name.
    LastName(Vec<u8>),
}

/// One order line of a New-Order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderLineInput {
    /// OL_I_ID (an unused id on the last line of a New-Order that rolls back).
    pub item: u32,
    /// OL_SUPPLY_W_ID.
    pub supply_w: u32,
    /// OL_QUANTITY.
    pub quantity: u32,
}

/// New-Order input (§2.4.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrderInput {
    /// W_ID.
    pub w: u32,
    /// D_ID.
    pub d: u32,
    /// C_ID.
    pub c: u32,
    /// The order lines (5 to 15).
    pub lines: Vec<OrderLineInput>,
}

/// Payment input (§2.5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentInput {
    /// W_ID (the terminal's warehouse).
    pub w: u32,
    /// D_ID.
    pub d: u32,
    /// C_W_ID (W_ID, or a remote warehouse).
    pub c_w: u32,
    /// C_D_ID.
    pub c_d: u32,
    /// The customer.
    pub customer: CustomerBy,
    /// H_AMOUNT, cents.
    pub amount: i64,
}

/// Order-Status input (§2.6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderStatusInput {
    /// W_ID.
    pub w: u32,
    /// D_ID.
    pub d: u32,
    /// The customer.
    pub customer: CustomerBy,
}

/// Delivery input (§2.7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryInput {
    /// W_ID.
    pub w: u32,
    /// O_CARRIER_ID.
    pub carrier: u32,
}

/// Stock-Level input (§2.8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockLevelInput {
    /// W_ID.
    pub w: u32,
    /// D_ID (fixed per terminal).
    pub d: u32,
    /// The threshold (10 to 20).
    pub threshold: i64,
}

/// Any transaction's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnInput {
    /// New-Order.
    NewOrder(NewOrderInput),
    /// Payment.
    Payment(PaymentInput),
    /// Order-Status.
    OrderStatus(OrderStatusInput),
    /// Delivery.
    Delivery(DeliveryInput),
    /// Stock-Level.
    StockLevel(StockLevelInput),
}

impl TxnInput {
    /// The transaction's type.
    pub fn kind(&self) -> TxnKind {
        match self {
            TxnInput::NewOrder(_) => TxnKind::NewOrder,
            TxnInput::Payment(_) => TxnKind::Payment,
            TxnInput::OrderStatus(_) => TxnKind::OrderStatus,
            TxnInput::Delivery(_) => TxnKind::Delivery,
            TxnInput::StockLevel(_) => TxnKind::StockLevel,
        }
    }
}

/// A terminal: deals the mix and draws each transaction's input.
#[derive(Debug, Clone)]
pub struct Terminal {
    rng: TpccRng,
    deck: Deck,
    scale: Scale,
    c: NuConstants,
    /// Fixed home warehouse, or `None` to draw one per transaction.
    home: Option<u32>,
    /// The Stock-Level district, fixed per terminal (§2.8.1.1).
    stock_level_district: u32,
}

impl Terminal {
    /// A terminal on a database of `scale` with the run's NURand constants `run` (see
    /// [`NuConstants::for_run`]), seeded by `seed`. With `home`, every transaction is for that
    /// warehouse (a terminal of the specification); without, each draws its warehouse
    /// uniformly (fewer terminals than warehouses, as in seed 000's 30 clients on 800).
    pub fn new(scale: Scale, run: NuConstants, seed: u64, home: Option<u32>) -> Self {
        let mut rng = TpccRng::new(seed);
        let stock_level_district = rng.uniform32(1, scale.districts);
        Self { rng, deck: Deck::default(), scale, c: run, home, stock_level_district }
    }

    /// The next transaction of the mix.
    pub fn next_input(&mut self) -> TxnInput {
        match self.deck.deal(&mut self.rng) {
            TxnKind::NewOrder => TxnInput::NewOrder(self.new_order()),
            TxnKind::Payment => TxnInput::Payment(self.payment()),
            TxnKind::OrderStatus => TxnInput::OrderStatus(self.order_status()),
            TxnKind::Delivery => TxnInput::Delivery(self.delivery()),
            TxnKind::StockLevel => TxnInput::StockLevel(self.stock_level()),
        }
    }

    fn warehouse(&mut self) -> u32 {
        match self.home {
            Some(w) => w,
            None => self.rng.uniform32(1, self.scale.warehouses),
        }
    }

    /// A warehouse other than `w` (or `w` when it is the only one).
    fn remote(&mut self, w: u32) -> u32 {
        if self.scale.warehouses == 1 {
            return w;
        }
        let other = self.rng.uniform32(1, self.scale.warehouses - 1);
        if other >= w {
            other + 1
        } else {
            other
        }
    }

    fn customer_id(&mut self) -> u32 {
        self.rng.nurand(1023, self.c.c_id, 1, u64::from(self.scale.customers)) as u32
    }

    fn customer_by(&mut self) -> CustomerBy {
        if self.rng.percent(60) {
            let n = self.rng.nurand(255, self.c.c_last, 0, u64::from(self.scale.last_names() - 1));
            CustomerBy::LastName(last_name(n as u32))
        } else {
            CustomerBy::Id(self.customer_id())
        }
    }

    /// New-Order input.
    pub fn new_order(&mut self) -> NewOrderInput {
        let w = self.warehouse();
        let d = self.rng.uniform32(1, self.scale.districts);
        let c = self.customer_id();
        let count = self.rng.uniform(5, 15) as usize;
        let rollback = self.rng.percent(1);
        let mut lines = Vec::with_capacity(count);
        for n in 0..count {
            let item = if rollback && n == count - 1 {
                self.scale.items + 1
            } else {
                self.rng.nurand(8191, self.c.ol_i_id, 1, u64::from(self.scale.items)) as u32
            };
            let supply_w = if self.rng.percent(1) { self.remote(w) } else { w };
            lines.push(OrderLineInput { item, supply_w, quantity: self.rng.uniform32(1, 10) });
        }
        NewOrderInput { w, d, c, lines }
    }

    /// Payment input.
    pub fn payment(&mut self) -> PaymentInput {
        let w = self.warehouse();
        let d = self.rng.uniform32(1, self.scale.districts);
        let (c_w, c_d) = if self.rng.percent(85) {
            (w, d)
        } else {
            let c_w = self.remote(w);
            (c_w, self.rng.uniform32(1, self.scale.districts))
        };
        let customer = self.customer_by();
        PaymentInput { w, d, c_w, c_d, customer, amount: self.rng.uniform_i64(100, 500_000) }
    }

    /// Order-Status input.
    pub fn order_status(&mut self) -> OrderStatusInput {
        let w = self.warehouse();
        let d = self.rng.uniform32(1, self.scale.districts);
        let customer = self.customer_by();
        OrderStatusInput { w, d, customer }
    }

    /// Delivery input.
    pub fn delivery(&mut self) -> DeliveryInput {
        DeliveryInput { w: self.warehouse(), carrier: self.rng.uniform32(1, 10) }
    }

    /// Stock-Level input.
    pub fn stock_level(&mut self) -> StockLevelInput {
        StockLevelInput {
            w: self.warehouse(),
            d: self.stock_level_district,
            threshold: self.rng.uniform_i64(10, 20),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pass_of_the_deck_is_the_exact_mix() {
        let mut rng = TpccRng::new(5);
        let mut deck = Deck::default();
        let mut first_pass = Vec::new();
        for pass in 0..20 {
            let mut counts = [0usize; 5];
            let mut order = Vec::new();
            for _ in 0..100 {
                let k = deck.deal(&mut rng);
                counts[k.index()] += 1;
                order.push(k);
            }
            assert_eq!(counts, [45, 43, 4, 4, 4], "pass {pass}");
            if pass == 0 {
                first_pass = order;
            } else if pass == 1 {
                assert_ne!(first_pass, order, "each pass is shuffled anew");
            }
        }
    }

    #[test]
    fn inputs_follow_the_specifications_ranges_and_shares() {
        let scale = Scale::standard(10);
        let c = NuConstants { c_last: 100, c_id: 200, ol_i_id: 300 };
        let mut t = Terminal::new(scale, c, 1, Some(3));
        let (mut orders, mut rollbacks, mut lines, mut remote_lines) = (0, 0, 0, 0);
        let (mut payments, mut remote_payments, mut by_name) = (0, 0, 0);
        for _ in 0..20_000 {
            match t.next_input() {
                TxnInput::NewOrder(n) => {
                    orders += 1;
                    assert_eq!(n.w, 3);
                    assert!((1..=10).contains(&n.d) && (1..=3000).contains(&n.c));
                    assert!((5..=15).contains(&n.lines.len()));
                    for (i, l) in n.lines.iter().enumerate() {
                        assert!((1..=10).contains(&l.quantity));
                        if l.item == 100_001 {
                            assert_eq!(i, n.lines.len() - 1, "only the last line has the unused item");
                            rollbacks += 1;
                        } else {
                            assert!((1..=100_000).contains(&l.item));
                        }
                        lines += 1;
                        remote_lines += usize::from(l.supply_w != 3);
                    }
                }
                TxnInput::Payment(p) => {
                    payments += 1;
                    assert!((100..=500_000).contains(&p.amount));
                    remote_payments += usize::from(p.c_w != 3);
                    if let CustomerBy::LastName(n) = &p.customer {
                        by_name += 1;
                        assert!(n.len() >= 9 && n.len() <= 15, "{n:?}");
                    }
                }
                TxnInput::StockLevel(s) => assert!((10..=20).contains(&s.threshold)),
                TxnInput::Delivery(d) => assert!((1..=10).contains(&d.carrier)),
                TxnInput::OrderStatus(_) => {}
            }
        }
        let share = |a: usize, b: usize| a as f64 / b as f64 * 100.0;
        assert!((0.5..1.6).contains(&share(rollbacks, orders)), "rollbacks {}", share(rollbacks, orders));
        assert!(
            (0.7..1.3).contains(&share(remote_lines, lines)),
            "remote lines {}",
            share(remote_lines, lines)
        );
        assert!((13.0..17.0).contains(&share(remote_payments, payments)));
        assert!((57.0..63.0).contains(&share(by_name, payments)));
    }

    #[test]
    fn one_warehouse_never_goes_remote() {
        let mut t = Terminal::new(Scale::reduced(1), NuConstants { c_last: 0, c_id: 0, ol_i_id: 0 }, 2, None);
        for _ in 0..2000 {
            match t.next_input() {
                TxnInput::NewOrder(n) => {
                    assert!(n.w == 1 && n.lines.iter().all(|l| l.supply_w == 1 && l.item <= 1001))
                }
                TxnInput::Payment(p) => assert!(p.w == 1 && p.c_w == 1),
                _ => {}
            }
        }
    }
}
