//! Black-box tests of lockgate over HTTP, each against a real `redis-server` it starts on a free port.

mod backend;
mod bad_input;
mod fencing;
mod helpers;
mod locks;
mod openapi;
mod seckill;
mod waiting;
