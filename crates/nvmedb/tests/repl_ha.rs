//! Pieces of automatic failover: a primary whose leadership lease is not renewed stops
//! acknowledging commits (its acknowledgement gate closes) and says so in its status; it
//! acknowledges again once the gate is reopened.

mod repl_common;

use nvmedb::repl::{open_primary, AckGate, ReplConfig, ReplError, ReplicationMode};
use nvmedb::{Error, Value};
use repl_common::*;
use std::time::Duration;

#[test]
fn a_primary_stops_acknowledging_when_its_lease_gate_closes() {
    let (p, s) = setup("gate");
    let sb = standby(&s, true);
    let gate = AckGate::closed();
    gate.open_until(gate.clock().now() + Duration::from_secs(600));
    let cfg = ReplConfig {
        ack_gate: Some(gate.clone()),
        ..config(vec![sb.addr().to_string()], ReplicationMode::Eager, fail_after(30_000))
    };
    let (db, log) = open_primary(&p, options(), cfg, None).unwrap();
    let t = db.table("t").unwrap();
    t.update_int(&Value::Int(1), 1, 1).unwrap();
    gate.close();
    let e = t.update_int(&Value::Int(2), 1, 2).unwrap_err();
    assert!(matches!(e, Error::Replication(ReplError::LeaseLost { .. })), "{e}");
    let st = log.status();
    assert!(st.lease_lost && st.to_string().contains("NOT ACKNOWLEDGING"), "{st}");
    // A deadline in the past does not reopen it.
    gate.open_until(gate.clock().now());
    assert!(t.update_int(&Value::Int(3), 1, 3).is_err());
    gate.open_until(gate.clock().now() + Duration::from_secs(600));
    t.update_int(&Value::Int(4), 1, 4).unwrap();
    assert!(!log.status().lease_lost);
}
