//! The store host's OAuth tokens: the operations and replies of Ferroute's `oauth_redis.lua`
//! (`read`, `seed`, `claim`, `publish`, `release`, `refuse`), one row per connection, so that
//! replicas in the simulation claim, present and publish refreshes exactly as through Redis.
//! `sim/tests/store_contract.rs` holds the two to the same answers.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
struct Row {
    generation: u64,
    origin: String,
    blob: String,
    issued: String,
    expires: u64,
    last: String,
    refused: Option<u64>,
    fence: u64,
    claim_fence: u64,
    claim_owner: String,
    claim_until: u64,
    /// The generation the claim refreshes; `None` once settled (published, released, refused).
    claim_from: Option<u64>,
}

/// Every connection's shared tokens.
#[derive(Debug, Default)]
pub struct TokenTable {
    rows: BTreeMap<String, Row>,
}

fn words(w: &[&str]) -> Vec<Option<String>> {
    w.iter().map(|x| Some((*x).to_owned())).collect()
}

impl Row {
    fn reply(&self, word: &str) -> Vec<Option<String>> {
        [
            word.to_owned(),
            self.generation.to_string(),
            self.origin.clone(),
            self.blob.clone(),
            self.issued.clone(),
            self.expires.to_string(),
            self.last.clone(),
            self.refused.map_or(String::new(), |g| g.to_string()),
        ]
        .into_iter()
        .map(Some)
        .collect()
    }

    /// Writes tokens, settling any claim (a lapsed holder can no longer publish) and any
    /// refusal; the fence counter stays.
    fn write(&mut self, generation: u64, origin: String, args: &[String]) -> Result<(), String> {
        self.generation = generation;
        self.origin = origin;
        self.blob.clone_from(&args[0]);
        self.issued.clone_from(&args[1]);
        self.expires = args[2].parse().map_err(|e| format!("expires: {e}"))?;
        self.last.clone_from(&args[3]);
        self.refused = None;
        self.claim_fence = 0;
        self.claim_from = None;
        self.claim_until = 0;
        self.claim_owner.clear();
        Ok(())
    }
}

impl TokenTable {
    /// Runs token operation `op` on `conn` at `now` (Unix ms).
    pub fn run(&mut self, op: &str, now: u64, conn: &str, args: &[String]) -> Result<Vec<Option<String>>, String> {
        let arg = |i: usize| args.get(i).cloned().ok_or_else(|| format!("{op}: argument {i} missing"));
        let num = |i: usize| arg(i).and_then(|a| a.parse::<u64>().map_err(|e| format!("{op}: argument {i}: {e}")));
        // The tokens' own arguments (blob, issued, expires, last) from index `i`.
        let tail = |i: usize| -> Result<Vec<String>, String> { (i..i + 4).map(arg).collect() };
        match op {
            "read" => Ok(self.rows.get(conn).map_or_else(|| words(&["none"]), |r| r.reply("tokens"))),
            "seed" => {
                let (origin, g, rest) = (arg(0)?, num(1)?, tail(2)?);
                let expires: u64 = rest[2].parse().map_err(|e| format!("seed: expires: {e}"))?;
                match self.rows.get_mut(conn) {
                    None => {
                        let mut r = Row::default();
                        r.write(g, origin, &rest)?;
                        self.rows.insert(conn.to_owned(), r);
                    }
                    Some(r) if r.origin == origin => {
                        if g > r.generation {
                            r.write(g, origin, &rest)?;
                        }
                    }
                    Some(r) => {
                        if expires > r.expires || r.refused == Some(r.generation) {
                            let next = g.max(r.generation + 1);
                            r.write(next, origin, &rest)?;
                        }
                    }
                }
                Ok(self.rows[conn].reply("tokens"))
            }
            "claim" => {
                let (owner, from, ttl, may_wait) = (arg(0)?, num(1)?, num(2)?, arg(3)? == "1");
                let Some(r) = self.rows.get_mut(conn) else { return Ok(words(&["none"])) };
                if r.generation > from {
                    return Ok(r.reply("newer"));
                }
                if r.generation < from {
                    return Ok(words(&["behind", &r.generation.to_string()]));
                }
                if r.refused == Some(r.generation) {
                    return Ok(words(&["refused", &r.generation.to_string()]));
                }
                let doubt = r.claim_from == Some(r.generation);
                if doubt && r.claim_until > now {
                    return Ok(words(&["busy", &r.claim_until.to_string()]));
                }
                if doubt && may_wait {
                    return Ok(words(&["doubt", &r.claim_until.to_string()]));
                }
                r.fence += 1;
                r.claim_fence = r.fence;
                r.claim_owner = owner;
                r.claim_until = now.saturating_add(ttl);
                r.claim_from = Some(r.generation);
                Ok(words(&["granted", &r.fence.to_string(), if doubt { "1" } else { "0" }]))
            }
            "publish" => {
                let (fence, g, rest) = (num(0)?, num(1)?, tail(2)?);
                let Some(r) = self.rows.get_mut(conn) else { return Ok(words(&["stale", "nothing is stored"])) };
                if r.claim_fence != fence {
                    return Ok(words(&["stale", "another replica claimed the refresh"]));
                }
                if g != r.generation + 1 {
                    return Ok(words(&["stale", &format!("generation {} is stored", r.generation)]));
                }
                let origin = r.origin.clone();
                r.write(g, origin, &rest)?;
                Ok(words(&["published"]))
            }
            "release" | "refuse" => {
                let fence = num(0)?;
                let Some(r) = self.rows.get_mut(conn) else { return Ok(words(&["kept"])) };
                if r.claim_fence != fence || r.claim_from != Some(r.generation) {
                    return Ok(words(&["kept"]));
                }
                r.claim_from = None;
                r.claim_until = 0;
                r.claim_owner.clear();
                if op == "refuse" {
                    r.refused = Some(r.generation);
                    return Ok(words(&["refused"]));
                }
                Ok(words(&["released"]))
            }
            other => Err(format!("unknown token operation {other}")),
        }
    }
}
