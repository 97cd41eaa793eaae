//! overhead
fn main() {}
