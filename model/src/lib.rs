//! A model of lockgate's lock protocol (the fair queue, grants and claims, tending, streamed locks, shutdown), checked with stateright.
//!
//! * [`scenario`]: time base, requests, faults, protocol switches
//! * [`state`]: Redis's keys of one lock, the gateways, the requests
//! * [`scripts`]: the Lua scripts, each one atomic step
//! * [`gateway`]: the gateway's side of a request, tending, shutdown
//! * [`system`]: the steps each actor may take, and the stateright `Model`
//! * [`properties`]: what must hold
//! * [`scenarios`]: the configurations checked
//! * [`check`]: running the checker, reading its findings
//! * [`trace`]: counterexamples as readable events

pub mod check;
pub mod gateway;
pub mod properties;
pub mod scenario;
pub mod scenarios;
pub mod scripts;
pub mod state;
pub mod step;
pub mod system;
pub mod trace;
