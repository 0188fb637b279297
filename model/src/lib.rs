//! A model of lockgate's lock protocol (the fair queue, grants and claims, tending, streamed locks, shutdown, Idempotency-Key twins, sessions, lock-delay, deadlock detection), checked with stateright.
//!
//! * [`scenario`]: time base, requests, faults, protocol switches
//! * [`state`]: Redis's keys of each lock and session, the gateways, the requests
//! * [`scripts`]: the Lua scripts, each one atomic step
//! * [`gateway`]: the gateway's side of a request, tending, shutdown
//! * [`batch`]: several locks at once on one Redis, all or none
//! * [`sessions`]: a session's keeper, and the sweep that ends expired sessions
//! * [`deadlock`]: the search for cycles of session waits, and what a real cycle is
//! * [`system`]: the steps each actor may take, and the stateright `Model`
//! * [`properties`]: what must hold
//! * [`scenarios`]: the configurations checked
//! * [`check`]: running the checker, reading its findings
//! * [`trace`]: counterexamples as readable events

pub mod batch;
pub mod check;
pub mod deadlock;
pub mod gateway;
pub mod properties;
pub mod scenario;
pub mod scenarios;
pub mod scripts;
pub mod sessions;
pub mod state;
pub mod step;
pub mod system;
pub mod trace;
