//! The config loader over any text: a config is loaded or refused with errors that name their
//! fields, never a panic; a loaded config loads again from the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxy::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let env = |name: &str| (name == "FUZZ_KEY").then(|| "sk-fuzz".to_owned());
    match Config::from_toml_str(text, &env, &[]) {
        Ok(_) => assert!(Config::from_toml_str(text, &env, &[]).is_ok(), "loading is not repeatable"),
        Err(e) => assert!(!e.0.is_empty(), "a refusal without errors"),
    }
});
