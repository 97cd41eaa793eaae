use super::*;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::time::Duration;

fn items(n: usize) -> Vec<Item> {
    (0..n).map(|i| Item { index: i, id: stable_hash(format!("t{i}").as_bytes()), ..Item::default() }).collect()
}

fn first_counts(strategy: Strategy, its: &[Item], ask: &Ask, runs: usize, seed: u64) -> BTreeMap<usize, usize> {
    let mut mem = Memory::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = BTreeMap::new();
    for _ in 0..runs {
        let order = rank(strategy, its, ask, "k", &mut mem, &mut rng);
        *out.entry(its[order[0]].index).or_insert(0) += 1;
    }
    out
}

#[test]
fn names_round_trip_and_aliases_parse() {
    for s in Strategy::ALL {
        assert_eq!(Strategy::parse(s.as_str()), Some(s));
    }
    assert_eq!(Strategy::parse("usage"), Some(Strategy::LeastUsed));
    assert_eq!(Strategy::parse("weekly-reset"), Some(Strategy::ResetWindow));
    assert_eq!(Strategy::parse("context"), Some(Strategy::ContextOptimized));
    assert_eq!(Strategy::parse("fusion"), None);
    assert!(Strategy::P2c.for_connections() && !Strategy::Auto.for_connections());
    assert_eq!(Strategy::parse("quota-share"), Some(Strategy::QuotaShare));
    assert!(!Strategy::ALL.contains(&Strategy::QuotaShare), "a connection strategy only");
}

#[test]
fn priority_keeps_the_listed_order() {
    let mut its = items(3);
    its.reverse();
    let order =
        rank(Strategy::Priority, &its, &Ask::default(), "k", &mut Memory::default(), &mut ChaCha8Rng::seed_from_u64(1));
    assert_eq!(order.iter().map(|&p| its[p].index).collect::<Vec<_>>(), vec![0, 1, 2]);
}

#[test]
fn round_robin_rotates_the_first_choice() {
    let its = items(3);
    let c = first_counts(Strategy::RoundRobin, &its, &Ask::default(), 9, 1);
    assert_eq!(c.values().copied().collect::<Vec<_>>(), vec![3, 3, 3]);
}

#[test]
fn weighted_three_to_one_within_two_points() {
    let mut its = items(2);
    its[0].weight = 3;
    let c = first_counts(Strategy::Weighted, &its, &Ask::default(), 20_000, 7);
    let share = c[&0] as f64 / 20_000.0;
    assert!((share - 0.75).abs() < 0.02, "share of the weight-3 target: {share}");
}

#[test]
fn weight_zero_is_never_first_while_others_have_weight() {
    let mut its = items(3);
    its[1].weight = 0;
    let c = first_counts(Strategy::Weighted, &its, &Ask::default(), 2_000, 3);
    assert!(!c.contains_key(&1));
}

#[test]
fn random_deck_gives_each_option_first_once_per_round() {
    let its = items(4);
    let mut mem = Memory::default();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for _ in 0..5 {
        let mut firsts: Vec<usize> =
            (0..4).map(|_| rank(Strategy::Random, &its, &Ask::default(), "k", &mut mem, &mut rng)[0]).collect();
        firsts.sort();
        assert_eq!(firsts, vec![0, 1, 2, 3]);
    }
}

#[test]
fn strict_random_is_uniform_and_repeats() {
    let its = items(4);
    let c = first_counts(Strategy::StrictRandom, &its, &Ask::default(), 8_000, 11);
    for n in c.values() {
        assert!((*n as f64 / 8_000.0 - 0.25).abs() < 0.03, "{c:?}");
    }
    // Independent draws: some round of four repeats an option.
    let mut mem = Memory::default();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let repeated = (0..50).any(|_| {
        let mut f: Vec<usize> =
            (0..4).map(|_| rank(Strategy::StrictRandom, &its, &Ask::default(), "k", &mut mem, &mut rng)[0]).collect();
        f.sort();
        f.dedup();
        f.len() < 4
    });
    assert!(repeated);
}

#[test]
fn p2c_never_puts_the_more_loaded_of_two_first() {
    let mut its = items(2);
    its[0].load = 5;
    let c = first_counts(Strategy::P2c, &its, &Ask::default(), 500, 5);
    assert_eq!(c.get(&0), None);
    // Of three, the most loaded is never first (it loses every pair it is drawn into).
    let mut its = items(3);
    its[2].load = 9;
    its[0].load = 1;
    let c = first_counts(Strategy::P2c, &its, &Ask::default(), 3_000, 5);
    assert_eq!(c.get(&2), None, "{c:?}");
    assert!(c[&1] > c[&0], "{c:?}");
}

#[test]
fn quota_share_leads_in_proportion_to_capacity_and_never_with_a_full_connection() {
    let mut its = items(2);
    its[0].capacity = Some(1);
    its[1].capacity = Some(3);
    let c = first_counts(Strategy::QuotaShare, &its, &Ask::default(), 400, 3);
    assert_eq!((c[&0], c[&1]), (100, 300), "{c:?}");
    // Three options: shares follow capacities 1:2:5 within a few percent.
    let mut its = items(3);
    for (i, cap) in [1, 2, 5].into_iter().enumerate() {
        its[i].capacity = Some(cap);
    }
    let c = first_counts(Strategy::QuotaShare, &its, &Ask::default(), 8_000, 3);
    for (i, share) in [(0, 1.0 / 8.0), (1, 2.0 / 8.0), (2, 5.0 / 8.0)] {
        let got = c[&i] as f64 / 8_000.0;
        assert!((got - share).abs() < 0.03, "option {i}: {got} vs {share} ({c:?})");
    }
    // A saturated option goes last; when every option is full the order still covers all.
    its[2].load = 5;
    let c = first_counts(Strategy::QuotaShare, &its, &Ask::default(), 300, 3);
    assert_eq!(c.get(&2), None, "{c:?}");
    its[0].load = 1;
    its[1].load = 2;
    let order = rank(
        Strategy::QuotaShare,
        &its,
        &Ask::default(),
        "k",
        &mut Memory::default(),
        &mut ChaCha8Rng::seed_from_u64(1),
    );
    assert_eq!(order.len(), 3);
}

#[test]
fn least_used_prefers_fewer_in_flight_then_fewer_dispatched() {
    let mut its = items(3);
    its[0].load = 2;
    its[1].used = 10;
    let order = load::least_used(&its);
    assert_eq!(order, vec![2, 1, 0]);
}

#[test]
fn fill_first_moves_a_drained_option_last() {
    let mut its = items(3);
    its[0].quota.remaining = Some(0.0);
    assert_eq!(simple::fill_first(&its), vec![1, 2, 0]);
}

#[test]
fn lkgp_sticks_to_the_last_good() {
    let mut its = items(3);
    its[2].last_good = true;
    assert_eq!(simple::lkgp(&its), vec![2, 0, 1]);
}

#[test]
fn cost_optimized_cheapest_first_unknown_last() {
    let mut its = items(3);
    its[0].cost = None;
    its[1].cost = Some(3.0);
    its[2].cost = Some(0.5);
    assert_eq!(score::cost(&its), vec![2, 1, 0]);
}

#[test]
fn context_optimized_smallest_fitting_window_first() {
    let mut its = items(4);
    its[0].context_window = Some(8_000);
    its[1].context_window = Some(200_000);
    its[2].context_window = Some(32_000);
    its[3].context_window = None;
    let ask = Ask { context_tokens: 20_000, ..Ask::default() };
    assert_eq!(score::context(&its, &ask), vec![2, 1, 3, 0]);
}

#[test]
fn reset_strategies_read_the_reported_quota() {
    let mut its = items(3);
    its[0].quota = Quota {
        remaining: Some(0.8),
        resets_in: Some(Duration::from_secs(600)),
        window: Some(Duration::from_secs(7 * 86_400)),
    };
    its[1].quota = Quota {
        remaining: Some(0.9),
        resets_in: Some(Duration::from_secs(3_000)),
        window: Some(Duration::from_secs(5 * 3_600)),
    };
    its[2].quota = Quota {
        remaining: Some(0.05),
        resets_in: Some(Duration::from_secs(60)),
        window: Some(Duration::from_secs(60)),
    };
    // reset-aware: the shortest window, but the drained one (5%) last.
    assert_eq!(quota::reset_aware(&its), vec![1, 0, 2]);
    // reset-window: the soonest reset.
    assert_eq!(quota::reset_window(&its), vec![2, 0, 1]);
    // An option that never reported comes first (it gets to report).
    let mut fresh = its.clone();
    fresh[1].quota = Quota::default();
    assert_eq!(quota::reset_window(&fresh)[0], 1);
    assert_eq!(quota::reset_aware(&fresh)[0], 1);
    // headroom: the most left.
    assert_eq!(quota::headroom(&its), vec![1, 0, 2]);
}

#[test]
fn reset_aware_tie_band_lets_headroom_decide() {
    let mut its = items(2);
    its[0].quota = Quota { remaining: Some(0.3), resets_in: None, window: Some(Duration::from_secs(3_600)) };
    its[1].quota = Quota { remaining: Some(0.9), resets_in: None, window: Some(Duration::from_secs(3_700)) };
    assert_eq!(quota::reset_aware(&its), vec![1, 0]);
}

#[test]
fn cache_optimized_keeps_a_prompt_on_one_option_and_spreads_prompts() {
    let its = items(4);
    let mut firsts = BTreeMap::new();
    for p in 0..400u64 {
        let ask = Ask { prefix_hash: stable_hash(format!("prompt {p}").as_bytes()), ..Ask::default() };
        let a = score::cache(&its, &ask)[0];
        assert_eq!(a, score::cache(&its, &ask)[0]);
        // Dropping another option never moves the prompt.
        let other = (a + 1) % 4;
        let fewer: Vec<Item> = its.iter().copied().filter(|i| i.index != other).collect();
        assert_eq!(fewer[score::cache(&fewer, &ask)[0]].index, its[a].index);
        *firsts.entry(a).or_insert(0) += 1;
    }
    assert_eq!(firsts.len(), 4, "{firsts:?}");
    assert!(firsts.values().all(|n| *n > 60), "{firsts:?}");
}

#[test]
fn auto_prefers_the_healthy_fast_cheap_option() {
    let mut its = items(3);
    its[0].health = 0.5;
    its[1].latency_ms = Some(900.0);
    its[2].latency_ms = Some(300.0);
    its[2].cost = Some(1.0);
    its[1].cost = Some(2.0);
    assert_eq!(score::auto(&its)[0], 2);
    let s = score::auto_scores(&its);
    assert!(s.iter().all(|x| (0.0..=1.0).contains(x)), "{s:?}");
}

#[test]
fn each_key_keeps_its_own_rotation_and_all_restart_past_the_cap() {
    let mut m = Memory::default();
    let turns: Vec<usize> = ["a", "a", "b", "a", "b", "a"].iter().map(|k| m.rotate(k, 3)).collect();
    assert_eq!(turns, [0, 1, 0, 2, 1, 0]);
    // "a", "b" and 9 998 more: the cap of 10 000 keys, all still held.
    for i in 0..9_998 {
        m.rotate(&format!("k{i}"), 3);
    }
    assert_eq!((m.rotate("a", 3), m.rotate("b", 3)), (1, 2));
    // One more new key clears them all.
    m.rotate("new", 3);
    assert_eq!((m.rotate("a", 3), m.rotate("b", 3), m.rotate("a", 3)), (0, 0, 1));
}

mod properties {
    use super::*;
    use proptest::prelude::{any, prop_assert_eq, proptest};
    use proptest::strategy::Strategy as Gen;

    fn arb_item() -> impl Gen<Value = Item> {
        (
            0u32..5,
            any::<u64>(),
            proptest::option::of(0.0f64..10.0),
            proptest::option::of(1u64..300_000),
            0u32..8,
            0u64..50,
            proptest::option::of(0.0f64..1.0),
            proptest::option::of(1u64..1_000_000),
            any::<bool>(),
        )
            .prop_map(|(weight, id, cost, ctx, load, used, remaining, reset, last_good)| Item {
                weight,
                id,
                cost,
                context_window: ctx,
                load,
                used,
                quota: super::Quota {
                    remaining,
                    resets_in: reset.map(Duration::from_millis),
                    window: reset.map(Duration::from_millis),
                },
                last_good,
                ..Item::default()
            })
    }

    proptest! {
        /// Every strategy returns each option exactly once (a permutation), for any inputs.
        #[test]
        fn every_strategy_orders_every_option_once(
            mut its in proptest::collection::vec(arb_item(), 0..9),
            seed in any::<u64>(),
            tokens in 0u64..400_000,
            prefix in any::<u64>(),
        ) {
            for (i, it) in its.iter_mut().enumerate() { it.index = i; }
            let ask = Ask { context_tokens: tokens, prefix_hash: prefix, tools: 0 };
            let mut mem = Memory::default();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for s in Strategy::ALL.into_iter().chain([Strategy::QuotaShare]) {
                for _ in 0..3 {
                    let mut order = rank(s, &its, &ask, "k", &mut mem, &mut rng);
                    order.sort();
                    prop_assert_eq!(order, (0..its.len()).collect::<Vec<_>>(), "{:?}", s);
                }
            }
        }
    }
}
