//! Black-box tests of lockgate over HTTP, each against a real `redis-server` it starts on a free port.

mod access;
mod backend;
mod bad_input;
mod buyers;
mod cluster;
mod connections;
mod faults;
mod fencing;
mod helpers;
mod layers;
mod limits;
mod lock_kinds;
mod locks;
mod observability;
mod openapi;
mod proxy;
mod readme;
mod replication;
mod run;
mod seckill;
mod settings;
mod shutdown;
mod streams;
mod waiting;
