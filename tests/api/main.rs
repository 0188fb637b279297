//! Black-box tests of lockgate over HTTP, each against a real `redis-server` it starts on a free port.

mod access;
mod backend;
mod bad_input;
mod faults;
mod fencing;
mod helpers;
mod limits;
mod locks;
mod observability;
mod openapi;
mod seckill;
mod shutdown;
mod waiting;
