//! Schedules that failed before a fix, replayed (docs/ha.md, "What the simulator found"). Each
//! is the schedule that found the bug, written out as the generator of its day made it from its
//! seed (the seed still drives every decision during the run). A run replays exactly as long as
//! the code does not change the order of what its threads do, so each fix also has a direct test
//! in `crates/nvmedb` (named below), which does not depend on a schedule.

use nvmedb::repl::ReplicationMode;
use nvmedb_sim::{run_schedule, Fault, Schedule};
use std::time::Duration;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn replay(s: Schedule) {
    if let Err(f) = run_schedule(s, None) {
        panic!("{f}");
    }
}

/// A schedule of the generator of its day: `ttl` in ms, the margin 0.4 of it, the tick a
/// quarter of the rest.
#[allow(clippy::too_many_arguments)] // one per field of the schedule of its day
fn schedule(
    seed: u64,
    nodes: usize,
    mode: ReplicationMode,
    clients: usize,
    run_for: u64,
    ttl: u64,
    commit_timeout: u64,
    faults: Vec<(u64, Fault)>,
) -> Schedule {
    let ttl = ms(ttl);
    let margin = ttl * 2 / 5;
    Schedule {
        seed,
        nodes,
        mode,
        mirror: false,
        clients,
        run_for: ms(run_for),
        ttl,
        margin,
        tick: (ttl - margin) / 4,
        commit_timeout: ms(commit_timeout),
        faults: faults.into_iter().map(|(at, f)| (ms(at), f)).collect(),
    }
}

/// Chain mode, three nodes: a member without a copy of the database waited forever for a base
/// backup that only the primary could send, and every takeover then failed; a standby whose
/// promotion failed after fencing refused every later fence and primary. Direct tests:
/// `repl_chain::a_chain_member_without_a_copy_is_seeded_by_the_standby_before_it`,
/// `repl_fencing::a_promotion_that_fails_after_fencing_leaves_a_working_standby`.
#[test]
fn seed_5_chain_members_are_seeded_along_the_chain_and_a_failed_promotion_recovers() {
    replay(schedule(
        5,
        3,
        ReplicationMode::Chain,
        1,
        5449,
        2000,
        2243,
        vec![
            (2558, Fault::Kill { node: 2, restart_after: ms(263) }),
            (3779, Fault::Reset { node: 1, pick: 7923356557145673415 }),
            (3985, Fault::Slow { from: 2, to: 1, extra: ms(194), duration: ms(1445) }),
            (4565, Fault::CrashAtIo { node: 0, after_ops: 358, restart_after: ms(2552) }),
            (5017, Fault::ClockJump { node: None, by: ms(2949) }),
            (5804, Fault::Partition { side: vec![0], store_on_side: false, heal_after: ms(1705) }),
        ],
    ));
}

/// A full disk failed a replica-log group commit; its records were dropped while later ones
/// were written and acknowledged, leaving a gap (an `acks` row without its index entry on the
/// node). Direct test: `repl::replica_log::tests::a_failed_sync_keeps_its_records_for_the_next_one`.
#[test]
fn seed_38_a_failed_replica_log_sync_keeps_its_records() {
    replay(schedule(
        38,
        4,
        ReplicationMode::Quorum(1),
        2,
        3344,
        1000,
        938,
        vec![
            (2460, Fault::Partition { side: vec![0, 1], store_on_side: true, heal_after: ms(1220) }),
            (2472, Fault::Partition { side: vec![0, 1, 2], store_on_side: false, heal_after: ms(1197) }),
            (3064, Fault::Kill { node: 3, restart_after: ms(567) }),
            (3129, Fault::Slow { from: 3, to: 0, extra: ms(313), duration: ms(664) }),
            (3445, Fault::DiskFull { node: 3, duration: ms(1498) }),
            (3648, Fault::PowerCut { node: 3, restart_after: ms(2588) }),
        ],
    ));
}

/// The same gap, in eager mode, after a full disk during apply and a failed promotion.
#[test]
fn seed_49_no_gap_after_a_full_disk_in_eager_mode() {
    replay(schedule(
        49,
        3,
        ReplicationMode::Eager,
        2,
        4027,
        1000,
        931,
        vec![
            (2124, Fault::DiskFull { node: 0, duration: ms(300) }),
            (2991, Fault::Partition { side: vec![1], store_on_side: true, heal_after: ms(350) }),
            (3059, Fault::Reset { node: 2, pick: 12174219674059284608 }),
            (3252, Fault::Partition { side: vec![0], store_on_side: true, heal_after: ms(1218) }),
        ],
    ));
}

/// A torn group commit left the replica log's device ending inside a block; the node could not
/// open its log again. Direct test:
/// `repl::replica_log::tests::a_torn_write_that_leaves_a_partial_block_is_cut_at_open`.
#[test]
fn seed_45_a_replica_log_ending_inside_a_block_opens() {
    replay(Schedule::from_seed(45));
}

/// Lazy mode: a peer whose log went on under the superseded primary could not be taken from,
/// and every candidate refused to promote, forever.
#[test]
fn seed_75_lazy_promotion_does_not_insist_on_a_diverged_peer() {
    replay(Schedule::from_seed(75));
}

/// A mirrored pair: the new primary's page mirror connected to its standby while a partition
/// cut them off, and the simulated connection attempt then waited its whole 30 s timeout
/// although the partition healed at once (real TCP sends the SYN again after 1, 2, 4, … s). The
/// simulated network now retransmits SYNs; no commit was at risk.
#[test]
fn seed_752_a_connection_attempt_goes_through_once_the_partition_heals() {
    replay(Schedule::from_seed(752));
}

/// A mirrored pair: a node's heap page was torn (by a power cut during a mirrored write, or a
/// mirrored write cut off when its connection broke) and the copy that could restore it, in the
/// node's double-write area, was made unusable when the other node opened as primary and
/// wrote a new generation of the area through the mirror (or overwritten as the ring wrapped):
/// the page failed recovery later. A standby without an apply thread never repaired its own
/// pages; it now does when it starts and before a mirrored write starts a new generation.
/// Direct test: `repl_basic::a_mirroring_standby_restores_a_torn_page_from_its_double_write_area_when_it_starts`.
#[test]
fn seed_415_a_mirrored_standby_repairs_a_page_torn_by_a_crash() {
    replay(Schedule {
        mirror: true,
        ..schedule(
            415,
            2,
            ReplicationMode::Eager,
            1,
            3236,
            1000,
            1942,
            vec![
                (1705, Fault::Kill { node: 0, restart_after: ms(173) }),
                (2025, Fault::CrashAtIo { node: 0, after_ops: 33, restart_after: ms(1517) }),
                (3051, Fault::Partition { side: vec![0, 1], store_on_side: true, heal_after: ms(1071) }),
                (3055, Fault::Reset { node: 1, pick: 10780606162130831382 }),
                (3063, Fault::Pause { node: 0, duration: ms(1922) }),
                (3110, Fault::Pause { node: 1, duration: ms(2640) }),
                (3164, Fault::Pause { node: 1, duration: ms(2087) }),
            ],
        )
    });
}

/// The same torn page without a copy, after a power cut, a kill and a full disk: a promotion's
/// mirrored write of the page was cut off on the standby, the promotion failed, and the next
/// one started a new double-write generation on both nodes.
#[test]
fn seed_475_a_mirrored_standby_repairs_a_page_torn_by_a_cut_off_write() {
    replay(Schedule {
        mirror: true,
        ..schedule(
            475,
            2,
            ReplicationMode::Eager,
            1,
            4004,
            1000,
            2175,
            vec![
                (1808, Fault::Partition { side: vec![0], store_on_side: true, heal_after: ms(1606) }),
                (2505, Fault::PowerCut { node: 1, restart_after: ms(661) }),
                (2737, Fault::Kill { node: 0, restart_after: ms(926) }),
                (3012, Fault::DiskFull { node: 1, duration: ms(861) }),
                (3216, Fault::Reset { node: 1, pick: 14919809624244736636 }),
            ],
        )
    });
}

/// Lazy mode, three nodes: the primary of epoch 3 took over while both other nodes were down,
/// then lost power; after the heal no node could ever lead again — the two others never
/// followed that primary (so they might lack its commits) and it was not a member of its own
/// synchronous set. The primary that recorded the set is now eligible itself (it holds every
/// commit it acknowledged). Direct test: `repl::ha::tests::one_node_takes_over_at_a_time_and_epochs_only_grow`.
#[test]
fn seed_1538_the_primary_that_recorded_the_set_may_lead_again() {
    replay(schedule(
        1538,
        3,
        ReplicationMode::Lazy,
        1,
        4361,
        1000,
        1418,
        vec![
            (1920, Fault::PowerCut { node: 2, restart_after: ms(1490) }),
            (2292, Fault::Slow { from: 0, to: 1, extra: ms(351), duration: ms(1231) }),
            (2375, Fault::Slow { from: 2, to: 0, extra: ms(384), duration: ms(812) }),
            (3354, Fault::PowerCut { node: 0, restart_after: ms(517) }),
            (3603, Fault::CrashAtIo { node: 1, after_ops: 20, restart_after: ms(2279) }),
            (4205, Fault::Partition { side: vec![0, 2], store_on_side: true, heal_after: ms(2540) }),
            (4221, Fault::Pause { node: 1, duration: ms(2388) }),
        ],
    ));
}

/// Chain mode, four nodes: a standby learned the new primary's chain while its forwarder of the
/// superseded epoch was still winding down; the forwarder's target was the same, so no new one
/// was started, and the old one then stopped: the rest of the chain got nothing more and no
/// commit went through again. A forwarder of another epoch now counts as finished.
#[test]
fn seed_3189_a_chain_member_forwards_again_under_a_new_primary() {
    replay(schedule(
        3189,
        4,
        ReplicationMode::Chain,
        1,
        3570,
        1500,
        1694,
        vec![
            (1646, Fault::Pause { node: 0, duration: ms(3624) }),
            (2242, Fault::Slow { from: 1, to: 3, extra: ms(92), duration: ms(522) }),
            (3010, Fault::Partition { side: vec![1, 2], store_on_side: false, heal_after: ms(888) }),
        ],
    ));
}

/// Found with a first version of the rule of seed 1538, which let the primary that recorded
/// the set lead again whatever happened since: quorum 3 of 3, four nodes; after the recorder
/// lost power, others took the key at epochs 4 to 6 and failed to promote, having fenced peers
/// and written records of those epochs; the recorder then led with its older log, and a
/// standby's pages held a change its log no longer had (recovery failed on it). The recorder
/// may now lead again only while no later epoch was handed out.
#[test]
fn seed_10847_the_recorder_does_not_lead_again_after_a_later_epoch_was_handed_out() {
    replay(Schedule::from_seed(10847));
}

/// The same first version of that rule in a mirrored pair: the peer's failed promotion had
/// mirrored its pages into the recorder's files, which then led with its older log; the two
/// nodes ended with different tables.
#[test]
fn seed_21913_a_mirrored_recorder_does_not_lead_again_after_its_peer_promoted() {
    replay(Schedule::from_seed(21913));
}

/// A mirrored pair: both nodes promoted at once (the store's clock jumped, so the first one's
/// lease ran out while it promoted). Each held its own mirror lock while opening its files and
/// mirrored its writes to the other, whose mirror connection waited for that lock: a deadlock
/// across the two nodes, which real TCP ends only when the mirror's 30 s timeout fails a
/// promotion, and which stopped the simulator. A mirrored write that arrives while the node
/// promotes is now refused at once.
#[test]
fn seed_9050_two_mirrored_nodes_promoting_at_once_do_not_wait_for_each_other() {
    replay(Schedule::from_seed(9050));
}

/// The same deadlock after partitions and a power cut at a storage operation.
#[test]
fn seed_9848_two_mirrored_nodes_promoting_at_once_after_partitions() {
    replay(Schedule::from_seed(9848));
}
