//! Black-box tests of lockgate over HTTP, each against a real `redis-server` it starts on a free port.

mod access;
mod backend;
mod bad_input;
mod cluster;
mod faults;
mod fencing;
mod helpers;
mod layers;
mod limits;
mod locks;
mod observability;
mod openapi;
mod readme;
mod replication;
mod run;
mod seckill;
mod shutdown;
mod streams;
mod waiting;
