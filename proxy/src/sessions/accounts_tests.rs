use super::*;

fn config(access: &str, refresh: &str) -> Config {
    let text = format!(
        "[[providers]]\nid = \"sub\"\nformat = \"anthropic\"\nclass = \"oauth\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"m\"]\n[[connections]]\nid = \"c1\"\nprovider = \"sub\"\noauth = {{ preset = \"claude\", access_token = \"{access}\", refresh_token = \"{refresh}\", expires_at = 1780000600000 }}\n"
    );
    Config::from_toml_str(&text, &|_| None, &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn header(a: &Accounts) -> String {
    a.credential("c1").map(|c| c.authorization.to_str().unwrap_or_default().to_owned()).unwrap_or_default()
}

const NOW: u64 = 1_780_000_000_000;

#[test]
fn a_refresh_is_stored_before_it_is_sent_and_one_overtaken_by_a_new_sign_in_is_dropped() {
    let store = Store::in_memory().expect("a store");
    let accounts = Accounts::new(Sealer::new(None).expect("no key"));
    assert_eq!(accounts.sync(&config("at-1", "rt-1"), Some(&store), NOW), (vec![], vec![]));
    assert_eq!(header(&accounts), "Bearer at-1");
    let stored = |s: &Store| s.load_tokens("c1", &Sealer::new(None).expect("no key")).expect("read").expect("a row");
    assert_eq!((stored(&store).refresh_token.as_str(), stored(&store).generation), ("rt-1", 0));

    // A refresh that ends normally: stored, then sent.
    let (_, Some(ticket), _) = accounts.begin("c1", NOW, Why::Refused { generation: 0 }) else { panic!("a flight") };
    assert_eq!(ticket.refresh_token, "rt-1");
    let life = Lifetime { issued_at_ms: NOW, expires_at_ms: NOW + 3_600_000 };
    let next = accounts.next_tokens("c1", "at-2".into(), "rt-2".into(), life, NOW).expect("tokens");
    assert!(accounts.finish("c1", &ticket, Answer::Refreshed(life), Some((&next, Some(&store))), NOW));
    assert_eq!(header(&accounts), "Bearer at-2");
    assert_eq!((stored(&store).refresh_token.as_str(), stored(&store).generation), ("rt-2", 1));

    // A refresh overtaken by a new sign-in in the config: neither stored nor adopted.
    let (_, Some(ticket), _) = accounts.begin("c1", NOW, Why::Refused { generation: 1 }) else { panic!("a flight") };
    let (renewed, problems) = accounts.sync(&config("at-new", "rt-new"), Some(&store), NOW + 1);
    assert_eq!((renewed, problems), (vec!["c1".to_owned()], vec![]));
    let late = accounts.next_tokens("c1", "at-3".into(), "rt-3".into(), life, NOW + 2).expect("tokens");
    assert!(!accounts.finish("c1", &ticket, Answer::Refreshed(life), Some((&late, Some(&store))), NOW + 2));
    assert_eq!(header(&accounts), "Bearer at-new");
    assert_eq!(stored(&store).refresh_token, "rt-new");
    assert_eq!(stored(&store).origin, origin_of("rt-new"));
}

#[test]
fn a_restart_takes_the_stored_rotation_while_the_config_names_the_same_sign_in() {
    let store = Store::in_memory().expect("a store");
    let first = Accounts::new(Sealer::new(None).expect("no key"));
    first.sync(&config("at-1", "rt-1"), Some(&store), NOW);
    let (_, Some(ticket), _) = first.begin("c1", NOW, Why::Refused { generation: 0 }) else { panic!("a flight") };
    let life = Lifetime { issued_at_ms: NOW, expires_at_ms: NOW + 3_600_000 };
    let next = first.next_tokens("c1", "at-2".into(), "rt-2".into(), life, NOW).expect("tokens");
    assert!(first.finish("c1", &ticket, Answer::Refreshed(life), Some((&next, Some(&store))), NOW));
    // The next process: the config still names rt-1, used up; the store's rt-2 wins.
    let second = Accounts::new(Sealer::new(None).expect("no key"));
    assert_eq!(second.sync(&config("at-1", "rt-1"), Some(&store), NOW + 10), (vec![], vec![]));
    assert_eq!(header(&second), "Bearer at-2");
    let (_, Some(ticket), _) = second.begin("c1", NOW + 10, Why::Refused { generation: 1 }) else { panic!("a flight") };
    assert_eq!(ticket.refresh_token, "rt-2");
}

#[test]
fn a_reload_that_changes_refresh_at_moves_the_next_refresh_and_keeps_the_tokens() {
    let store = Store::in_memory().expect("a store");
    let accounts = Accounts::new(Sealer::new(None).expect("no key"));
    accounts.sync(&config("at-1", "rt-1"), Some(&store), NOW);
    assert!(accounts.take_unshared(), "new tokens are offered to the replicas");
    assert!(!accounts.take_unshared());
    // The config's token lives 600 s from NOW: 80 % is 480 s in.
    assert_eq!(accounts.view("c1").and_then(|v| v.next_refresh), Some(NOW + 480_000));
    let mut halved = config("at-1", "rt-1");
    for c in &mut halved.connections {
        if let Some(o) = &mut c.oauth {
            o.refresh_at = Some(0.5);
        }
    }
    accounts.sync(&halved, Some(&store), NOW + 1);
    assert_eq!(accounts.view("c1").and_then(|v| v.next_refresh), Some(NOW + 300_000));
    assert_eq!(header(&accounts), "Bearer at-1");
    assert!(!accounts.take_unshared(), "the same tokens: nothing to offer");
}

#[test]
fn a_stored_row_that_does_not_open_is_never_overwritten_by_the_config() {
    let dir = tempfile::tempdir().expect("a dir");
    let right = Sealer::new(Some("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")).expect("a key");
    let wrong = Sealer::new(Some("HyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4=")).expect("a key");
    let store = Store::open_dir(dir.path()).expect("a store");
    let first = Accounts::new(right.clone());
    first.sync(&config("at-1", "rt-1"), Some(&store), NOW);
    let (_, Some(ticket), _) = first.begin("c1", NOW, Why::Refused { generation: 0 }) else { panic!("a flight") };
    let life = Lifetime { issued_at_ms: NOW, expires_at_ms: NOW + 3_600_000 };
    let next = first.next_tokens("c1", "at-2".into(), "rt-2".into(), life, NOW).expect("tokens");
    assert!(first.finish("c1", &ticket, Answer::Refreshed(life), Some((&next, Some(&store))), NOW));
    // Started with the wrong key: the config's tokens serve, the row is told about and kept.
    let mistaken = Accounts::new(wrong);
    let (renewed, problems) = mistaken.sync(&config("at-1", "rt-1"), Some(&store), NOW + 1);
    assert!(renewed.is_empty());
    assert!(problems.len() == 1 && problems[0].contains("do not decrypt"), "{problems:?}");
    assert_eq!(header(&mistaken), "Bearer at-1");
    let kept = store.load_tokens("c1", &right).expect("still opens").expect("a row");
    assert_eq!((kept.refresh_token.as_str(), kept.generation), ("rt-2", 1));
}
