//! The stores the contract suites compare: Redis (a real `redis-server`, `chaos::redis`) under
//! a key prefix, and the simulation's store host on a loopback port.
#![allow(dead_code)]

use chaos::redis::Redis;
use proxy::replicas::shared_store::{RedisStore, SharedStore};
use scenarios::store::{StoreHost, serve_store};
use sim::store::{Io, StoreClient};
use std::sync::Arc;

/// A client of `redis` under key prefix `prefix`.
pub fn redis_store(redis: &Redis, prefix: &str) -> Arc<dyn SharedStore> {
    Arc::new(RedisStore::new(redis::Client::open(redis.url()).expect("url"), prefix))
}

/// A fresh store host on a loopback port, and a client of it (call inside a runtime).
pub async fn sim_store() -> Arc<dyn SharedStore> {
    sim_clients(1).await.remove(0)
}

/// A fresh store host on a loopback port, and `n` clients of it (call inside a runtime).
pub async fn sim_clients(n: usize) -> Vec<Arc<dyn SharedStore>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve_store(listener, StoreHost::new()));
    (0..n)
        .map(|_| -> Arc<dyn SharedStore> {
            Arc::new(StoreClient::new(Arc::new(move || {
                Box::pin(async move { Ok(Box::new(tokio::net::TcpStream::connect(addr).await?) as Box<dyn Io>) })
            })))
        })
        .collect()
}

/// A single-threaded runtime for a test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}
