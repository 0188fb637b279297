//! The operator's view of the fleet and changes of its format (`lockgate format status | raise | lower`): what each would do, decided on what the fleet's record says, and done by one script that checks it again.

use crate::duration::millis;
use crate::redis::fleet::{self, FleetState, FormatChange, FormatRequest, InstanceRecord};
use crate::redis::{BackendError, Connection};

use super::build::{STALE, VERSION, WRITES};

/// How an operator's raise is recorded.
pub const RAISE: &str = "raise";
/// How an operator's lower is recorded (after which no automatic raise
/// happens until an operator raises).
pub const LOWER: &str = "lower";
/// How a raise the fleet made by itself is recorded.
pub const AUTOMATIC_RAISE: &str = "automatic raise";

/// The fleet as an operator sees it.
#[derive(Debug, Clone)]
pub struct Status {
    pub fleet: FleetState,
    /// The `lockgate_*` libraries loaded that no live instance names.
    pub unnamed: Vec<String>,
}

/// Reads the fleet (as a beat that records no instance) and the libraries.
pub async fn status(conn: &mut Connection, prefix: &str) -> Result<Status, BackendError> {
    let fleet = fleet::beat(
        conn,
        prefix,
        None,
        millis(STALE),
        (fleet::FIRST_FORMAT, "lockgate format status"),
    )
    .await?;
    // This build's own library is named: the command loaded it itself to
    // read the record, and it is the same as its instances'.
    let own = crate::redis::library().0;
    let unnamed = fleet::libraries(conn)
        .await?
        .into_iter()
        .filter(|library| library != own && !fleet.instances.iter().any(|i| &i.library == library))
        .collect();
    Ok(Status { fleet, unnamed })
}

/// What a raise or a lower would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Change the format in use from one to the other.
    Change { from: u32, to: u32 },
    /// Nothing to do, and why.
    Nothing(String),
    /// Not while the fleet is as it is, and why.
    Refused(String),
}

/// The first live instance that cannot write `format`, described.
fn cannot_write(instances: &[InstanceRecord], format: u32) -> Option<String> {
    instances
        .iter()
        .find(|instance| !instance.writes(format))
        .map(|instance| {
            format!(
                "instance {} ({} at {}) writes formats {}..{}, not {format}",
                instance.id,
                instance.version,
                instance.address,
                instance.writes[0],
                instance.writes[1]
            )
        })
}

/// What `format raise [--to N] [--force]` would do: to `to`, or the
/// highest format every live instance writes (this build's highest when
/// none is live). Refused while a live instance cannot write it, and,
/// unless `force`, while a library no live instance names is loaded: the
/// only sign of a running instance of 0.1.0, which keeps no record.
pub fn plan_raise(status: &Status, to: Option<u32>, force: bool) -> Plan {
    let current = status.fleet.format;
    let instances = &status.fleet.instances;
    let highest = instances
        .iter()
        .map(|instance| instance.writes[1])
        .min()
        .unwrap_or(WRITES[1]);
    let target = to.unwrap_or(highest);
    if target <= current {
        return Plan::Nothing(match to {
            Some(_) => format!("the format in use is {current} already, not below {target}"),
            None => format!(
                "the format in use is {current}, and the live instances write at most {highest}: nothing to raise to"
            ),
        });
    }
    if let Some(instance) = cannot_write(instances, target) {
        return Plan::Refused(instance);
    }
    if instances.is_empty() && target > WRITES[1] {
        return Plan::Refused(format!(
            "no live instance writes format {target}, and this build writes at most {}",
            WRITES[1]
        ));
    }
    if !force && !status.unnamed.is_empty() {
        return Plan::Refused(format!(
            "function libraries no live instance names are loaded ({}): an instance of a \
             release before 0.2.0, which keeps no record, may still run and could not follow; \
             stop it and wait until its library is deleted, or raise with --force",
            status.unnamed.join(", ")
        ));
    }
    Plan::Change {
        from: current,
        to: target,
    }
}

/// What `format lower [--to N]` would do: to `to`, or the format below
/// the one in use. Refused while a live instance cannot write it.
pub fn plan_lower(status: &Status, to: Option<u32>) -> Plan {
    let current = status.fleet.format;
    if to.is_none() && current <= fleet::FIRST_FORMAT {
        return Plan::Nothing(format!("the format in use is {current}, the first"));
    }
    let target = to.unwrap_or_else(|| current.saturating_sub(1));
    if target >= current {
        return Plan::Nothing(format!(
            "the format in use is {current} already, not above {target}"
        ));
    }
    if target < fleet::FIRST_FORMAT {
        return Plan::Refused(format!("there is no format below {}", fleet::FIRST_FORMAT));
    }
    match cannot_write(&status.fleet.instances, target) {
        Some(instance) => Plan::Refused(instance),
        None => Plan::Change {
            from: current,
            to: target,
        },
    }
}

/// Makes the change a plan decided (`how`: [`RAISE`] or [`LOWER`]), if the
/// format is still the one it was decided on and every live instance still
/// writes the new one.
pub async fn change(
    conn: &mut Connection,
    prefix: &str,
    (from, to): (u32, u32),
    how: &str,
) -> Result<FormatChange, BackendError> {
    let by = format!("lockgate format {how} ({})", VERSION);
    let request = FormatRequest {
        to,
        from: Some(from),
        by: &by,
        how,
    };
    fleet::change_format(conn, prefix, request, millis(STALE)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(id: &str, writes: [u32; 2]) -> InstanceRecord {
        InstanceRecord {
            id: id.to_owned(),
            version: "9.9.9".to_owned(),
            reads: (1..=writes[1]).collect(),
            writes,
            started_at_ms: 1,
            address: "127.0.0.1:8080".to_owned(),
            library: format!("lockgate_{id}"),
            seen_at_ms: Some(1),
        }
    }

    fn status(format: u32, instances: Vec<InstanceRecord>, unnamed: &[&str]) -> Status {
        Status {
            fleet: FleetState {
                format,
                migrations: Vec::new(),
                instances,
                now_ms: 1,
            },
            unnamed: unnamed.iter().map(|name| (*name).to_owned()).collect(),
        }
    }

    #[test]
    fn a_raise_goes_to_the_highest_format_every_live_instance_writes() {
        let fleet = status(1, vec![instance("a", [1, 3]), instance("b", [1, 2])], &[]);
        assert_eq!(
            plan_raise(&fleet, None, false),
            Plan::Change { from: 1, to: 2 }
        );
        let Plan::Refused(why) = plan_raise(&fleet, Some(3), false) else {
            panic!("a raise past what b writes");
        };
        assert!(why.contains("instance b"), "{why}");
        let same = status(2, vec![instance("a", [1, 2])], &[]);
        assert!(matches!(plan_raise(&same, None, false), Plan::Nothing(_)));
    }

    #[test]
    fn a_library_nobody_names_holds_a_raise_back_unless_forced() {
        let fleet = status(1, vec![instance("a", [1, 2])], &["lockgate_old"]);
        let Plan::Refused(why) = plan_raise(&fleet, None, false) else {
            panic!("raised beside an unknown library");
        };
        assert!(why.contains("lockgate_old"), "{why}");
        assert_eq!(
            plan_raise(&fleet, None, true),
            Plan::Change { from: 1, to: 2 }
        );
    }

    #[test]
    fn a_lower_is_refused_while_a_live_instance_cannot_write_it() {
        let fleet = status(3, vec![instance("a", [1, 3]), instance("b", [2, 3])], &[]);
        assert_eq!(plan_lower(&fleet, None), Plan::Change { from: 3, to: 2 });
        assert!(
            matches!(plan_lower(&fleet, Some(1)), Plan::Refused(why) if why.contains("instance b"))
        );
        assert!(matches!(
            plan_lower(&status(1, vec![], &[]), None),
            Plan::Nothing(_)
        ));
        assert!(matches!(
            plan_lower(&status(1, vec![], &[]), Some(0)),
            Plan::Refused(_)
        ));
        assert!(matches!(plan_lower(&fleet, Some(3)), Plan::Nothing(_)));
    }
}
