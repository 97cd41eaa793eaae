//! soak
fn main() {}
