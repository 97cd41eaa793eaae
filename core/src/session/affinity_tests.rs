//! Session affinity tests (M5).

use super::*;
use crate::testutil::t0;

const TTL: Duration = Duration::from_secs(600);

fn drain(a: &mut Affinity) -> Vec<PinEvent> {
    std::iter::from_fn(|| a.poll_event()).collect()
}

#[test]
fn a_fresh_pin_wins_and_lapses_after_its_ttl() {
    let now = t0();
    let mut a = Affinity::new();
    assert_eq!(a.choose(now, "s", "p", &["k1", "k2"], TTL), Some(0));
    a.used(now, "k1");
    // Routing now prefers k2 first; the pin keeps k1.
    assert_eq!(a.choose(now, "s", "p", &["k2", "k1"], TTL), Some(1));
    assert!(matches!(drain(&mut a).as_slice(), [PinEvent::Set { connection, .. }] if connection == "k1"));
    // Past the TTL the pin is gone: the least recently used (never used: k2) is pinned.
    let later = now + TTL + Duration::from_secs(1);
    assert_eq!(a.choose(later, "s", "p", &["k1", "k2"], TTL), Some(1));
    assert_eq!(a.pinned(later, "s", "p"), Some("k2"));
    // A zero TTL turns affinity off.
    assert_eq!(a.choose(later, "t", "p", &["k1"], Duration::ZERO), None);
}

#[test]
fn a_pin_to_an_ineligible_connection_is_replaced_by_the_least_recently_used() {
    let now = t0();
    let mut a = Affinity::new();
    for (i, k) in ["k1", "k2", "k3"].into_iter().enumerate() {
        a.used(now + Duration::from_secs(i as u64), k);
    }
    a.restore(now, "s", "p", "k3", TTL);
    // k3 is not eligible now: the pin moves to the least recently used of the others (k1).
    assert_eq!(a.choose(now + Duration::from_secs(5), "s", "p", &["k2", "k1"], TTL), Some(1));
    let ev = drain(&mut a);
    assert!(matches!(&ev[0], PinEvent::Dropped { session, .. } if session == "s"), "{ev:?}");
    assert!(matches!(&ev[1], PinEvent::Set { connection, .. } if connection == "k1"), "{ev:?}");
}

#[test]
fn an_account_failure_evicts_every_pin_to_it() {
    let now = t0();
    let mut a = Affinity::new();
    a.choose(now, "s1", "p", &["k1", "k2"], TTL);
    a.choose(now, "s2", "q", &["k1"], TTL);
    drain(&mut a);
    assert_eq!(a.evict_connection("k1"), 2);
    assert_eq!(drain(&mut a).len(), 2);
    assert!(a.is_empty(now));
    // Sessions are pinned per provider.
    a.choose(now, "s", "p", &["k1"], TTL);
    a.choose(now, "s", "q", &["k9"], TTL);
    assert_eq!((a.pinned(now, "s", "p"), a.pinned(now, "s", "q")), (Some("k1"), Some("k9")));
}

#[test]
fn at_the_cap_the_soonest_expiring_pins_make_room_a_slice_at_a_time() {
    let now = t0();
    let mut a = Affinity::new();
    for i in 0..MAX_PINS {
        a.restore(now, &format!("s{i}"), "p", "k1", Duration::from_secs(1_000 + i as u64));
    }
    assert_eq!(a.len(now), MAX_PINS);
    a.choose(now, "new", "p", &["k2"], TTL);
    let dropped = MAX_PINS / MAKE_ROOM;
    assert_eq!(a.len(now), MAX_PINS - dropped + 1);
    assert_eq!(drain(&mut a).len(), dropped + 1, "each dropped pin announced, and the new one");
    assert_eq!(a.pinned(now, &format!("s{}", dropped - 1), "p"), None, "the soonest-expiring went");
    assert_eq!(a.pinned(now, &format!("s{dropped}"), "p"), Some("k1"), "the next one stayed");
    // Room for a slice more before the next pass.
    for i in 0..dropped - 1 {
        a.choose(now, &format!("more{i}"), "p", &["k2"], TTL);
    }
    assert_eq!(a.len(now), MAX_PINS);
    // Lapsed pins go first, and only they.
    let later = now + Duration::from_secs(1_000 + dropped as u64 + 10);
    a.choose(later, "last", "p", &["k2"], TTL);
    assert_eq!(a.pinned(later, &format!("s{}", dropped + 11), "p"), Some("k1"));
    assert_eq!(a.pinned(later, &format!("s{}", dropped + 9), "p"), None, "lapsed");
    // The pins to k2 made at `now` lapsed too (their TTL is 600 s): only the last is left.
    assert_eq!(a.evict_connection("k2"), 1, "the index knows the pins to k2");
    assert_eq!(a.len(later), MAX_PINS - dropped - 11 + 1 - 1);
}

#[test]
fn a_lower_cap_makes_room_one_pin_at_a_time_and_restores_no_more() {
    let now = t0();
    let mut a = Affinity::new();
    a.set_max_pins(3);
    for (i, left) in [30, 10, 20].into_iter().enumerate() {
        a.restore(now, &format!("s{i}"), "p", "k1", Duration::from_secs(left));
    }
    assert!(!a.restore(now, "s3", "p", "k1", TTL), "a restore beyond the cap says it was refused");
    assert_eq!(a.len(now), 3, "a restore beyond the cap is not kept");
    assert!(a.restore(now, "s1", "p", "k2", TTL), "one already kept is taken at the cap");
    assert!(!a.restore(now, "s4", "p", "k2", Duration::ZERO), "a lapsed pin is not");
    assert_eq!(a.pinned(now, "s1", "p"), Some("k2"), "one already kept is replaced");
    a.choose(now, "new", "p", &["k3"], TTL);
    assert_eq!(a.len(now), 3);
    assert_eq!(a.pinned(now, "s2", "p"), None, "the soonest-ending (20 s) went, alone");
    assert_eq!(a.pinned(now, "s0", "p"), Some("k1"));
    let later = now + Duration::from_secs(40);
    a.choose(later, "s2", "p", &["k3"], TTL);
    assert_eq!(a.len(later), 3, "the lapsed pin (s0) made room");
    a.choose(later, "y", "p", &["k3"], TTL);
    assert_eq!((a.len(later), a.pinned(later, "s2", "p")), (3, Some("k3")), "then the soonest-ending");
    a.set_max_pins(0);
    a.choose(later, "x", "p", &["k3"], TTL);
    assert_eq!(a.len(later), 1, "a cap of 0 keeps one");
}

#[test]
fn among_many_pins_each_key_finds_its_own() {
    // Enough keys that many share the few hash bits the table compares first: a lookup must
    // still tell the keys themselves apart.
    let now = t0();
    let mut a = Affinity::new();
    let conn = |i: usize| format!("k{}", i % 7);
    for i in 0..5_000 {
        a.restore(now, &format!("s{i}"), &format!("p{}", i % 3), &conn(i), TTL);
    }
    for i in 0..5_000 {
        assert_eq!(a.pinned(now, &format!("s{i}"), &format!("p{}", i % 3)), Some(conn(i).as_str()), "s{i}");
        assert_eq!(a.pinned(now, &format!("s{i}"), &format!("p{}", (i + 1) % 3)), None, "s{i} on another provider");
    }
    assert_eq!(a.evict_connection("k3"), (0..5_000).filter(|i| i % 7 == 3).count());
    assert_eq!(a.len(now), (0..5_000).filter(|i| i % 7 != 3).count());
}

#[test]
fn touching_persists_only_after_half_the_ttl() {
    let now = t0();
    let mut a = Affinity::new();
    a.choose(now, "s", "p", &["k1"], TTL);
    drain(&mut a);
    a.choose(now + Duration::from_secs(60), "s", "p", &["k1"], TTL);
    assert!(drain(&mut a).is_empty());
    a.choose(now + Duration::from_secs(400), "s", "p", &["k1"], TTL);
    assert_eq!(drain(&mut a).len(), 1);
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn sorted(a: &Affinity) -> BTreeMap<String, BTreeSet<u64>> {
        a.by_connection.iter().map(|(c, hashes)| (c.clone(), hashes.iter().copied().collect())).collect()
    }

    fn index_of(a: &Affinity) -> BTreeMap<String, BTreeSet<u64>> {
        let mut index: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for pin in &a.pins {
            assert_eq!(pin.hash, key_hash(&pin.session, &pin.provider), "a pin keeps its key's hash");
            index.entry(pin.connection.clone()).or_default().insert(pin.hash);
        }
        index
    }

    proptest! {
        /// Whatever happens, `choose` picks from the pool it was given, and a session keeps
        /// its connection while that connection stays in the pool and the pin is fresh.
        #[test]
        fn picks_stay_in_the_pool_and_stick(ops in proptest::collection::vec((0u8..4, 0usize..4, 1u64..400), 1..80)) {
            let conns = ["k0", "k1", "k2", "k3"];
            let mut a = Affinity::new();
            let mut now = t0();
            let mut last: Option<&str> = None;
            for (op, n, dt) in ops {
                now += Duration::from_secs(dt);
                match op {
                    0 => { a.evict_connection(conns[n]); last = None; }
                    1 => a.used(now, conns[n]),
                    _ => {
                        let pool: Vec<&str> = conns.iter().copied().filter(|c| *c != conns[n] || op == 2).collect();
                        let fresh = a.pinned(now, "s", "p").map(str::to_owned);
                        let i = a.choose(now, "s", "p", &pool, TTL).expect("a pick");
                        prop_assert!(i < pool.len());
                        if let (Some(f), Some(prev)) = (fresh.as_deref(), last)
                            && pool.contains(&f) {
                            prop_assert_eq!(pool[i], prev);
                        }
                        last = Some(pool[i]);
                    }
                }
                prop_assert_eq!(&sorted(&a), &index_of(&a), "the connection index follows the pins");
            }
        }

        /// The connection index follows restores, sweeps and unpins too, over several
        /// sessions and providers.
        #[test]
        fn the_connection_index_follows_every_change(ops in proptest::collection::vec((0u8..7, 0usize..3, 0usize..3, 0usize..3), 1..80)) {
            let conns = ["k0", "k1", "k2"];
            let mut a = Affinity::new();
            let mut now = t0();
            for (op, s, p, c) in ops {
                let (session, provider) = (format!("s{s}"), format!("p{p}"));
                match op {
                    0 => { a.evict_connection(conns[c]); }
                    1 => { a.choose(now, &session, &provider, &conns[c..], TTL); }
                    2 => { a.restore(now, &session, &provider, conns[c], Duration::from_secs(60 * c as u64)); }
                    3 => { a.unpin(&session, &provider); }
                    4 => { now += Duration::from_secs(200); a.sweep(now); }
                    5 => {
                        let left = Duration::from_secs(60 * c as u64);
                        a.restore_all(now, [(session.clone(), provider.clone(), conns[c].to_owned(), left)].into_iter());
                    }
                    _ => { a.choose(now, &session, &provider, &[conns[c]], TTL); }
                }
                prop_assert_eq!(&sorted(&a), &index_of(&a));
            }
        }
    }
}
