//! Column types and typed values.
//!
//! Owns: [`ColumnType`], [`Value`] (its total order, hashing and display) and the decimal
//! text form of `Numeric` values. Invariant: doubles compare, hash and order by their
//! IEEE-754 total order with every NaN equal and `-0.0` equal to `0.0`, so values can be keys
//! of maps; values of different kinds order by kind.

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// 64-bit signed integer.
    Int,
    /// Fixed-length byte string of exactly `n` bytes (shorter values are zero-padded), like
    /// SQL `char(n)`.
    Char(u32),
    /// Variable-length byte string of at most `max` bytes.
    Bytes(u32),
    /// 32-bit signed integer (SQL `integer`); values are [`Value::Int`] within range.
    Int32,
    /// 16-bit signed integer (SQL `smallint`); values are [`Value::Int`] within range.
    Int16,
    /// 64-bit IEEE-754 floating point (SQL `double precision`); values are [`Value::Double`].
    Double,
    /// A boolean; values are [`Value::Bool`].
    Bool,
    /// Microseconds since 1970-01-01 00:00:00 (SQL `timestamp`, no time zone); values are
    /// [`Value::Timestamp`].
    Timestamp,
    /// Fixed-point decimal (SQL `numeric(precision, scale)`), at most 38 digits of which
    /// `scale` follow the point; values are [`Value::Numeric`] holding the value times
    /// 10^scale.
    Numeric {
        /// Total number of significant digits allowed (1..=38).
        precision: u8,
        /// Digits after the decimal point (0..=precision).
        scale: u8,
    },
    /// UTF-8 text of at most `max` characters (SQL `varchar(max)`; `u32::MAX` for `text`);
    /// values are [`Value::Bytes`] holding valid UTF-8. Its length is checked against the
    /// page when a row is stored, not when the table is created.
    Text(u32),
    /// Days since 1970-01-01 (SQL `date`, proleptic Gregorian); values are [`Value::Int`]
    /// within the 32-bit range, stored in 4 bytes, keyed like integers.
    Date,
}

impl ColumnType {
    /// The type's tag in the catalog's encoding, with its argument (a length, or for
    /// `Numeric` the precision in bits 8..16 and the scale in bits 0..8): see docs/format.md.
    pub fn tag(self) -> (u8, u32) {
        match self {
            ColumnType::Int => (1, 0),
            ColumnType::Char(n) => (2, n),
            ColumnType::Bytes(n) => (3, n),
            ColumnType::Int32 => (4, 0),
            ColumnType::Int16 => (5, 0),
            ColumnType::Double => (6, 0),
            ColumnType::Bool => (7, 0),
            ColumnType::Timestamp => (8, 0),
            ColumnType::Numeric { precision, scale } => (9, u32::from(precision) << 8 | u32::from(scale)),
            ColumnType::Text(n) => (10, n),
            ColumnType::Date => (11, 0),
        }
    }

    /// The type of catalog tag `tag` with argument `arg` (the inverse of [`ColumnType::tag`]);
    /// None for a tag no type has.
    pub fn from_tag(tag: u8, arg: u32) -> Option<Self> {
        Some(match tag {
            1 => ColumnType::Int,
            2 => ColumnType::Char(arg),
            3 => ColumnType::Bytes(arg),
            4 => ColumnType::Int32,
            5 => ColumnType::Int16,
            6 => ColumnType::Double,
            7 => ColumnType::Bool,
            8 => ColumnType::Timestamp,
            9 => ColumnType::Numeric { precision: (arg >> 8) as u8, scale: arg as u8 },
            10 => ColumnType::Text(arg),
            11 => ColumnType::Date,
            _ => return None,
        })
    }

    /// True for the integer types (`Int`, `Int32`, `Int16`): their values are [`Value::Int`]
    /// and their keys are all [`key::encode_i64`].
    ///
    /// [`key::encode_i64`]: crate::btree::key::encode_i64
    pub fn is_integer(self) -> bool {
        matches!(self, ColumnType::Int | ColumnType::Int32 | ColumnType::Int16)
    }

    /// Bytes a value of this type takes in a row when its size is fixed.
    pub fn fixed_size(self) -> Option<usize> {
        match self {
            ColumnType::Int | ColumnType::Double | ColumnType::Timestamp => Some(8),
            ColumnType::Int32 | ColumnType::Date => Some(4),
            ColumnType::Int16 => Some(2),
            ColumnType::Bool => Some(1),
            ColumnType::Numeric { .. } => Some(16),
            ColumnType::Char(n) => Some(n as usize),
            ColumnType::Bytes(_) | ColumnType::Text(_) => None,
        }
    }
}

/// A typed value.
///
/// Doubles compare, hash and order by their IEEE-754 total order, with every NaN equal to
/// every other and `-0.0` equal to `0.0`, so values can be keys of maps.
#[derive(Debug, Clone)]
pub enum Value {
    /// An integer (for `Int`, `Int32` and `Int16` columns).
    Int(i64),
    /// A byte string (for `Char`, `Bytes` and `Text` columns).
    Bytes(Vec<u8>),
    /// SQL NULL (for nullable columns).
    Null,
    /// A floating-point number (for `Double` columns).
    Double(f64),
    /// A boolean (for `Bool` columns).
    Bool(bool),
    /// Microseconds since 1970-01-01 00:00:00 (for `Timestamp` columns).
    Timestamp(i64),
    /// A fixed-point number: the value times 10^scale of its column (for `Numeric`
    /// columns; see [`parse_decimal`] and [`format_decimal`]).
    Numeric(i128),
}

/// `f64` bits made comparable: NaNs are one value, `-0.0` is `0.0`, then the sign-flip trick
/// turns IEEE order into unsigned order.
pub(super) fn double_order_bits(v: f64) -> u64 {
    let v = if v.is_nan() {
        f64::NAN
    } else if v == 0.0 {
        0.0
    } else {
        v
    };
    let b = v.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b ^ (1 << 63)
    }
}

impl Value {
    fn rank(&self) -> u8 {
        match self {
            Value::Int(_) => 0,
            Value::Bytes(_) => 1,
            Value::Null => 2,
            Value::Double(_) => 3,
            Value::Bool(_) => 4,
            Value::Timestamp(_) => 5,
            Value::Numeric(_) => 6,
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Value {}
impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Value {
    /// Values of one variant in their natural order (doubles by IEEE total order with NaN
    /// last); values of different variants by variant.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::Bytes(a), Value::Bytes(b)) => a.cmp(b),
            (Value::Null, Value::Null) => std::cmp::Ordering::Equal,
            (Value::Double(a), Value::Double(b)) => double_order_bits(*a).cmp(&double_order_bits(*b)),
            (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
            (Value::Timestamp(a), Value::Timestamp(b)) => a.cmp(b),
            (Value::Numeric(a), Value::Numeric(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}
impl std::hash::Hash for Value {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.rank().hash(state);
        match self {
            Value::Int(v) | Value::Timestamp(v) => v.hash(state),
            Value::Bytes(b) => b.hash(state),
            Value::Null => {}
            Value::Double(d) => double_order_bits(*d).hash(state),
            Value::Bool(b) => b.hash(state),
            Value::Numeric(n) => n.hash(state),
        }
    }
}

impl std::fmt::Display for Value {
    /// A short human-readable form (byte strings as lossy UTF-8 without trailing zero
    /// padding, numerics as their scaled integer).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Bytes(b) => write!(f, "'{}'", String::from_utf8_lossy(b).trim_end_matches('\0')),
            Value::Null => write!(f, "NULL"),
            Value::Double(d) => write!(f, "{d}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Timestamp(t) => write!(f, "{t}µs"),
            Value::Numeric(n) => write!(f, "{n}e-scale"),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Bytes(v.as_bytes().to_vec())
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Double(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl Value {
    /// The integer, if this is an `Int`.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }
    /// The bytes, if this is a `Bytes`.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }
    /// True for [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Value::Int(_) => "an integer",
            Value::Bytes(_) => "bytes",
            Value::Null => "NULL",
            Value::Double(_) => "a double",
            Value::Bool(_) => "a boolean",
            Value::Timestamp(_) => "a timestamp",
            Value::Numeric(_) => "a numeric",
        }
    }
}

/// Largest precision of a `Numeric` column (what an `i128` holds).
pub const NUMERIC_MAX_PRECISION: u8 = 38;

/// Parses a decimal literal (`-12.345`, `+7`, `.5`, `1e3`) into its value times 10^scale,
/// rounding half away from zero like PostgreSQL; `None` if it is not a number or does not fit.
pub fn parse_decimal(s: &str, scale: u8) -> Option<i128> {
    let s = s.trim();
    let (neg, s) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (mant, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (int_part, frac_part) = match mant.find('.') {
        Some(i) => (&mant[..i], &mant[i + 1..]),
        None => (mant, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part.bytes().chain(frac_part.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    // digits × 10^(exp - frac_len), then × 10^scale.
    let mut digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).map(|b| b - b'0').collect();
    let shift = exp as i64 - frac_part.len() as i64 + i64::from(scale);
    let mut round_up = false;
    if shift < 0 {
        let cut = (-shift) as usize;
        if cut > digits.len() {
            digits.clear();
        } else {
            let keep = digits.len() - cut;
            round_up = digits[keep] >= 5;
            digits.truncate(keep);
        }
    }
    let mut v: i128 = 0;
    for d in digits {
        v = v.checked_mul(10)?.checked_add(i128::from(d))?;
    }
    if shift > 0 {
        v = v.checked_mul(10i128.checked_pow(u32::try_from(shift).ok()?)?)?;
    }
    if round_up {
        v = v.checked_add(1)?;
    }
    Some(if neg { -v } else { v })
}

/// Formats a value times 10^scale as a decimal with exactly `scale` digits after the point.
pub fn format_decimal(v: i128, scale: u8) -> String {
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    let sign = if v < 0 { "-" } else { "" };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits
    };
    let (i, f) = padded.split_at(padded.len() - scale);
    format!("{sign}{i}.{f}")
}
