//! Ferroute's own Redis scripts (`lease_redis.lua`, `oauth_redis.lua`, `prune_redis.lua`), run as
//! they are by an embedded Lua 5.1 (Redis's Lua) over an in-memory keyspace that answers the few
//! commands they call (`GET`, `SET`, `DEL`, `INCR`, `HGET`, `HMGET`, `HSET`, `HINCRBY`, `HDEL`,
//! `SADD`, `SREM`, `SMEMBERS`, `ZADD`, `ZREM`, `ZRANGEBYSCORE`, `PEXPIRE`) with Redis's replies.
//! The shared state itself (the hash `sim:state` and its deadlines in the sorted set
//! `sim:expiry`) lives in the same keyspace, written with the commands the gateway's pipeline
//! sends to Redis. So the simulation's store host runs the very
//! logic Redis runs, and a change to a script is a change in the simulation too;
//! `sim/tests/store_contract.rs` and `token_contract.rs` hold the two to the same answers.
//!
//! `PEXPIRE` sets a key's deadline as Redis does, on the clock the scripts are given (`now`, the
//! gateway's Unix ms, which in the simulation is simulated time): a key past its deadline is gone
//! before the next script runs, `SET` and `DEL` clear the deadline, `HSET` keeps it. So an ended
//! lease stays readable for the `retain` the gateway asks for, and no longer.

use mlua::{Function, Lua, MultiValue, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

const LEASE: &str = include_str!("../../proxy/src/replicas/lease_redis.lua");
const TOKENS: &str = include_str!("../../proxy/src/replicas/oauth_redis.lua");
const PRUNE: &str = include_str!("../../proxy/src/replicas/prune_redis.lua");

/// The key prefix the scripts are run under (each store host is its own keyspace).
pub const PREFIX: &str = "sim";

#[derive(Debug, Clone)]
enum Entry {
    Str(String),
    Hash(BTreeMap<String, String>),
    Set(BTreeSet<String>),
    /// A sorted set: member → score.
    Zset(BTreeMap<String, f64>),
}

/// The keyspace: entries, the deadlines `PEXPIRE` set (Unix ms), and the clock of the script
/// running now.
#[derive(Debug, Default)]
struct Space {
    entries: BTreeMap<String, Entry>,
    deadlines: BTreeMap<String, u64>,
    now: u64,
}

impl Space {
    /// Sets the clock and lets every key whose deadline has come lapse, as Redis would have.
    fn at(&mut self, now: u64) {
        self.now = now;
        let due: Vec<String> = self.deadlines.iter().filter(|(_, at)| **at <= now).map(|(k, _)| k.clone()).collect();
        for k in due {
            self.deadlines.remove(&k);
            self.entries.remove(&k);
        }
    }

    /// Removes a key and its deadline.
    fn remove(&mut self, key: &str) -> bool {
        self.deadlines.remove(key);
        self.entries.remove(key).is_some()
    }

    /// `PEXPIRE key ms`: 1 and a deadline `ms` from now (a key at once gone when `ms` is not
    /// positive), or 0 when there is no such key.
    fn pexpire(&mut self, key: &str, ms: i64) -> Reply {
        if !self.entries.contains_key(key) {
            return Reply::Int(0);
        }
        if ms <= 0 {
            self.remove(key);
        } else {
            self.deadlines.insert(key.to_owned(), self.now.saturating_add(ms.unsigned_abs()));
        }
        Reply::Int(1)
    }
}

type Keys = Arc<Mutex<Space>>;

fn keys(k: &Keys) -> MutexGuard<'_, Space> {
    k.lock().unwrap_or_else(|p| p.into_inner())
}

/// A Redis reply, as the scripts see it.
enum Reply {
    Nil,
    Int(i64),
    Bulk(String),
    Status(&'static str),
    Array(Vec<Reply>),
}

/// One command's arguments as Redis receives them: strings, numbers in their integer form.
fn words(args: MultiValue) -> Result<Vec<String>, String> {
    args.into_iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.to_str().map_err(|e| e.to_string())?.to_owned()),
            Value::Integer(i) => Ok(i.to_string()),
            Value::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => Ok(format!("{n:.0}")),
            Value::Number(n) => Ok(n.to_string()),
            other => {
                Err(format!("Lua redis lib command arguments must be strings or integers, not {}", other.type_name()))
            }
        })
        .collect()
}

fn int(s: &str, what: &str) -> Result<i64, String> {
    s.parse().map_err(|_| format!("ERR {what} is not an integer or out of range"))
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Runs one command on the keyspace: the key-level ones (`DEL`, `PEXPIRE`) on the keyspace,
/// the rest on one key's value by its type.
fn command(space: &mut Space, w: &[String]) -> Result<Reply, String> {
    let name = w.first().map(|c| c.to_ascii_uppercase()).unwrap_or_default();
    let arg =
        |i: usize| w.get(i).map(String::as_str).ok_or_else(|| format!("ERR wrong number of arguments for '{name}'"));
    let out = match name.as_str() {
        "DEL" => return Ok(Reply::Int(w[1..].iter().filter(|key| space.remove(key)).count() as i64)),
        "PEXPIRE" => return Ok(space.pexpire(arg(1)?, int(arg(2)?, "value")?)),
        "GET" | "SET" | "INCR" => {
            if name == "SET" {
                space.deadlines.remove(arg(1)?);
            }
            string(&mut space.entries, &name, &arg)?
        }
        "HGET" | "HMGET" | "HSET" | "HINCRBY" | "HDEL" | "HGETALL" => hash(&mut space.entries, &name, w, &arg)?,
        "ZADD" | "ZREM" | "ZRANGEBYSCORE" => zset(&mut space.entries, &name, w, &arg)?,
        "SADD" | "SREM" | "SMEMBERS" => set(&mut space.entries, &name, w, &arg)?,
        other => {
            return Err(format!(
                "ERR unknown command '{other}' (the simulation's store answers only what Ferroute's scripts call)"
            ));
        }
    };
    // A hash or set emptied (its last field or member removed) is gone, as in Redis, and takes
    // its deadline with it.
    if let Some(key) = w.get(1) {
        let emptied = match space.entries.get(key) {
            Some(Entry::Hash(h)) => h.is_empty(),
            Some(Entry::Set(s)) => s.is_empty(),
            Some(Entry::Zset(z)) => z.is_empty(),
            Some(Entry::Str(_)) => false,
            None => true,
        };
        if emptied {
            space.remove(key);
        }
    }
    Ok(out)
}

type Arg<'a> = dyn Fn(usize) -> Result<&'a str, String> + 'a;

/// `GET`, `SET`, `INCR` on a string key.
fn string<'a>(k: &mut BTreeMap<String, Entry>, name: &str, arg: &Arg<'a>) -> Result<Reply, String> {
    Ok(match name {
        "GET" => match k.get(arg(1)?) {
            None => Reply::Nil,
            Some(Entry::Str(s)) => Reply::Bulk(s.clone()),
            Some(_) => return Err(WRONGTYPE.to_owned()),
        },
        "SET" => {
            k.insert(arg(1)?.to_owned(), Entry::Str(arg(2)?.to_owned()));
            Reply::Status("OK")
        }
        _ => {
            let key = arg(1)?;
            let n = match k.get(key) {
                None => 1,
                Some(Entry::Str(s)) => int(s, "value")? + 1,
                Some(_) => return Err(WRONGTYPE.to_owned()),
            };
            k.insert(key.to_owned(), Entry::Str(n.to_string()));
            Reply::Int(n)
        }
    })
}

/// `HGET`, `HMGET`, `HSET`, `HINCRBY` on a hash key.
fn hash<'a>(k: &mut BTreeMap<String, Entry>, name: &str, w: &'a [String], arg: &Arg<'a>) -> Result<Reply, String> {
    let key = arg(1)?;
    let h = match k.entry(key.to_owned()).or_insert_with(|| Entry::Hash(BTreeMap::new())) {
        Entry::Hash(h) => h,
        _ => return Err(WRONGTYPE.to_owned()),
    };
    let reply = match name {
        "HGET" => h.get(arg(2)?).map_or(Reply::Nil, |v| Reply::Bulk(v.clone())),
        "HMGET" => {
            Reply::Array(w[2..].iter().map(|f| h.get(f).map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))).collect())
        }
        "HDEL" => Reply::Int(w[2..].iter().filter(|f| h.remove(f.as_str()).is_some()).count() as i64),
        "HGETALL" => {
            Reply::Array(h.iter().flat_map(|(f, v)| [Reply::Bulk(f.clone()), Reply::Bulk(v.clone())]).collect())
        }
        "HSET" => {
            if w.len() < 4 || !w.len().is_multiple_of(2) {
                return Err("ERR wrong number of arguments for 'hset' command".to_owned());
            }
            let added = w[2..].chunks(2).filter(|p| h.insert(p[0].clone(), p[1].clone()).is_none()).count();
            Reply::Int(added as i64)
        }
        _ => {
            let by = int(arg(3)?, "increment")?;
            let n = h.get(arg(2)?).map_or(Ok(0), |v| int(v, "hash value"))? + by;
            h.insert(arg(2)?.to_owned(), n.to_string());
            Reply::Int(n)
        }
    };
    Ok(reply)
}

/// A score bound of `ZRANGEBYSCORE`: a number, `-inf` or `+inf` (inclusive; `(` not used).
fn bound(s: &str) -> Result<f64, String> {
    match s {
        "-inf" => Ok(f64::NEG_INFINITY),
        "+inf" | "inf" => Ok(f64::INFINITY),
        n => n.parse().map_err(|_| "ERR min or max is not a float".to_owned()),
    }
}

/// `ZADD key score member`, `ZREM key member…`, `ZRANGEBYSCORE key min max [LIMIT offset
/// count]` (members by score, then by name, as Redis orders them).
fn zset<'a>(k: &mut BTreeMap<String, Entry>, name: &str, w: &'a [String], arg: &Arg<'a>) -> Result<Reply, String> {
    let key = arg(1)?;
    let z = match k.entry(key.to_owned()).or_insert_with(|| Entry::Zset(BTreeMap::new())) {
        Entry::Zset(z) => z,
        _ => return Err(WRONGTYPE.to_owned()),
    };
    Ok(match name {
        "ZADD" => {
            let score = bound(arg(2)?).map_err(|_| "ERR value is not a valid float".to_owned())?;
            Reply::Int(i64::from(z.insert(arg(3)?.to_owned(), score).is_none()))
        }
        "ZREM" => Reply::Int(w[2..].iter().filter(|m| z.remove(m.as_str()).is_some()).count() as i64),
        _ => {
            let (min, max) = (bound(arg(2)?)?, bound(arg(3)?)?);
            let (skip, take) = match w.get(4).map(|l| l.to_ascii_uppercase()) {
                Some(l) if l == "LIMIT" => {
                    let count = int(arg(6)?, "value")?;
                    (int(arg(5)?, "value")?.max(0) as usize, if count < 0 { usize::MAX } else { count as usize })
                }
                Some(_) => return Err("ERR syntax error".to_owned()),
                None => (0, usize::MAX),
            };
            let mut hits: Vec<(&String, f64)> =
                z.iter().filter(|(_, s)| **s >= min && **s <= max).map(|(m, s)| (m, *s)).collect();
            hits.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
            Reply::Array(hits.into_iter().skip(skip).take(take).map(|(m, _)| Reply::Bulk(m.clone())).collect())
        }
    })
}

/// `SADD`, `SREM`, `SMEMBERS` on a set key.
fn set<'a>(k: &mut BTreeMap<String, Entry>, name: &str, w: &'a [String], arg: &Arg<'a>) -> Result<Reply, String> {
    let key = arg(1)?;
    let s = match k.entry(key.to_owned()).or_insert_with(|| Entry::Set(BTreeSet::new())) {
        Entry::Set(s) => s,
        _ => return Err(WRONGTYPE.to_owned()),
    };
    let reply = match name {
        "SADD" => Reply::Int(w[2..].iter().filter(|m| s.insert((*m).clone())).count() as i64),
        "SREM" => Reply::Int(w[2..].iter().filter(|m| s.remove(m.as_str())).count() as i64),
        _ => Reply::Array(s.iter().map(|m| Reply::Bulk(m.clone())).collect()),
    };
    Ok(reply)
}

/// A reply as Lua sees it (Redis's conversion: nil → false, status → `{ok = …}`).
fn to_lua(lua: &Lua, r: Reply) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Nil => Value::Boolean(false),
        Reply::Int(i) => Value::Number(i as f64),
        Reply::Bulk(s) => Value::String(lua.create_string(&s)?),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.set("ok", s)?;
            Value::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

/// A script's result as a Redis reply: words, numbers as integers, false as absent; an array
/// ends at its first nil, as in Redis. `Err` for an error reply.
fn from_lua(v: Value) -> Result<Vec<Option<String>>, String> {
    let Value::Table(t) = v else { return Err(format!("the script returned a {}, not an array", v.type_name())) };
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        return Err(e.to_str().map_err(|e| e.to_string())?.to_owned());
    }
    let mut out = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i).map_err(|e| e.to_string())? {
            Value::Nil => break,
            Value::Boolean(false) => out.push(None),
            Value::String(s) => out.push(Some(s.to_str().map_err(|e| e.to_string())?.to_owned())),
            Value::Integer(n) => out.push(Some(n.to_string())),
            Value::Number(n) => out.push(Some(format!("{:.0}", n.trunc()))),
            other => return Err(format!("the script returned a {} inside its reply", other.type_name())),
        }
    }
    Ok(out)
}

/// The two scripts, loaded once, over one keyspace.
pub struct Scripts {
    lua: Lua,
    store: Keys,
    lease: Function,
    tokens: Function,
    prune: Function,
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripts").finish_non_exhaustive()
    }
}

impl Scripts {
    /// An empty keyspace with Ferroute's scripts loaded.
    pub fn new() -> Result<Scripts, String> {
        let lua = Lua::new();
        let store: Keys = Arc::default();
        let setup = || -> mlua::Result<(Function, Function, Function)> {
            let redis = lua.create_table()?;
            let k = Arc::clone(&store);
            let call = lua.create_function(move |lua, args: MultiValue| {
                let w = words(args).map_err(mlua::Error::RuntimeError)?;
                let reply = command(&mut keys(&k), &w).map_err(mlua::Error::RuntimeError)?;
                to_lua(lua, reply)
            })?;
            redis.set("call", call)?;
            let error_reply = lua.create_function(|lua, msg: String| {
                let t = lua.create_table()?;
                t.set("err", msg)?;
                Ok(t)
            })?;
            redis.set("error_reply", error_reply)?;
            lua.globals().set("redis", redis)?;
            Ok((
                lua.load(LEASE).set_name("lease_redis.lua").into_function()?,
                lua.load(TOKENS).set_name("oauth_redis.lua").into_function()?,
                lua.load(PRUNE).set_name("prune_redis.lua").into_function()?,
            ))
        };
        let (lease, tokens, prune) = setup().map_err(|e| e.to_string())?;
        Ok(Scripts { lua, store, lease, tokens, prune })
    }

    fn run(&self, script: &Function, now: u64, argv: Vec<String>) -> Result<Vec<Option<String>>, String> {
        from_lua(self.call(script, now, argv)?)
    }

    fn call(&self, script: &Function, now: u64, argv: Vec<String>) -> Result<Value, String> {
        keys(&self.store).at(now);
        let set = || -> mlua::Result<Value> {
            self.lua.globals().set("ARGV", self.lua.create_sequence_from(argv)?)?;
            script.call::<Value>(())
        };
        set().map_err(|e| e.to_string())
    }

    /// Commands on the keyspace, as the gateway's pipeline sends them to Redis.
    fn commands(&self, all: &[Vec<String>]) -> Result<Vec<Reply>, String> {
        let mut space = keys(&self.store);
        all.iter().map(|w| command(&mut space, w)).collect()
    }

    /// Sets a field of the shared state, with its end (Unix ms) in `sim:expiry` or none.
    pub fn set_field(&self, field: &str, value: &str, expires_ms: Option<u64>) -> Result<(), String> {
        let (state, expiry) = (format!("{PREFIX}:state"), format!("{PREFIX}:expiry"));
        let w = |parts: &[&str]| parts.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>();
        let at = expires_ms.map(|a| a.to_string());
        let second = match &at {
            Some(at) => w(&["ZADD", &expiry, at, field]),
            None => w(&["ZREM", &expiry, field]),
        };
        self.commands(&[w(&["HSET", &state, field, value]), second]).map(|_| ())
    }

    /// Removes fields of the shared state.
    pub fn delete_fields(&self, fields: &[String]) -> Result<(), String> {
        let mut hdel = vec!["HDEL".to_owned(), format!("{PREFIX}:state")];
        let mut zrem = vec!["ZREM".to_owned(), format!("{PREFIX}:expiry")];
        hdel.extend_from_slice(fields);
        zrem.extend_from_slice(fields);
        self.commands(&[hdel, zrem]).map(|_| ())
    }

    /// The shared state, field by field.
    pub fn state(&self) -> Vec<(String, String)> {
        let Ok(mut r) = self.commands(&[vec!["HGETALL".to_owned(), format!("{PREFIX}:state")]]) else { return vec![] };
        let Some(Reply::Array(items)) = r.pop() else { return vec![] };
        let words: Vec<String> =
            items.into_iter().filter_map(|i| if let Reply::Bulk(s) = i { Some(s) } else { None }).collect();
        words.chunks(2).filter_map(|p| Some((p.first()?.clone(), p.get(1)?.clone()))).collect()
    }

    /// `prune_redis.lua` at `now` (Unix ms), removing at most `limit` fields: how many went.
    pub fn prune(&self, now: u64, limit: usize) -> Result<u64, String> {
        match self.call(&self.prune, now, vec![PREFIX.to_owned(), now.to_string(), limit.to_string()])? {
            Value::Integer(n) => Ok(n.max(0) as u64),
            Value::Number(n) => Ok(n.max(0.0) as u64),
            other => Err(format!("prune_redis.lua returned a {}", other.type_name())),
        }
    }

    /// Lease operation `op` at `now` (Unix ms) with its arguments, an ended lease readable for
    /// `retain_ms`, as `lease_redis.lua`.
    pub fn lease(&self, op: &str, now: u64, retain_ms: u64, args: &[String]) -> Result<Vec<Option<String>>, String> {
        let mut argv = vec![op.to_owned(), PREFIX.to_owned(), now.to_string(), retain_ms.to_string()];
        argv.extend_from_slice(args);
        self.run(&self.lease, now, argv)
    }

    /// Token operation `op` on `connection` at `now`, as `oauth_redis.lua`.
    pub fn tokens(&self, op: &str, now: u64, connection: &str, args: &[String]) -> Result<Vec<Option<String>>, String> {
        let mut argv = vec![op.to_owned(), PREFIX.to_owned(), now.to_string(), connection.to_owned()];
        argv.extend_from_slice(args);
        self.run(&self.tokens, now, argv)
    }
}
