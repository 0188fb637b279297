//! `lockgate format status | raise | lower`: the fleet's data format, shown or changed by an operator, asking nothing (fit for a script): each prints what it will do, then does it or says why not.

use std::process::ExitCode;

use serde_json::json;

use super::handoff::plain_redis;
use crate::config::{FormatCommand, RedisArgs};
use crate::fleet::operator::{self, Plan, Status};
use crate::fleet::{READS, VERSION, WRITES};
use crate::redis::fleet::FormatChange;

/// Runs a `format` subcommand: 0 when it did (or had nothing to do), 1 when
/// refused, 2 when Redis could not be read.
pub async fn format_command(command: FormatCommand) -> ExitCode {
    let (FormatCommand::Status { redis, .. }
    | FormatCommand::Raise { redis, .. }
    | FormatCommand::Lower { redis, .. }) = &command;
    let (redis, prefix) = match connect(redis.clone()) {
        Ok(reached) => reached,
        Err(err) => return unreadable(&err),
    };
    let mut conn = match redis.connection().await {
        Ok(conn) => conn,
        Err(err) => return unreadable(&err.to_string()),
    };
    let status = match operator::status(&mut conn, &prefix).await {
        Ok(status) => status,
        Err(err) => return unreadable(&err.to_string()),
    };
    let (plan, how) = match command {
        FormatCommand::Status { json, .. } => {
            print_status(&status, json);
            return ExitCode::SUCCESS;
        }
        FormatCommand::Raise { to, force, .. } => {
            (operator::plan_raise(&status, to, force), operator::RAISE)
        }
        FormatCommand::Lower { to, .. } => (operator::plan_lower(&status, to), operator::LOWER),
    };
    let (from, to) = match plan {
        Plan::Nothing(why) => {
            println!("nothing to {how}: {why}");
            return ExitCode::SUCCESS;
        }
        Plan::Refused(why) => {
            eprintln!("lockgate format {how}: refused: {why}");
            return ExitCode::FAILURE;
        }
        Plan::Change { from, to } => (from, to),
    };
    println!("{how} the data format in use from {from} to {to}");
    match operator::change(&mut conn, &prefix, (from, to), how).await {
        Ok(FormatChange::Changed { from, to }) => {
            println!(
                "done: the format in use is {to} (was {from}); every live instance follows within a beat"
            );
            ExitCode::SUCCESS
        }
        Ok(FormatChange::Same) => {
            println!("done: the format in use is {to} already");
            ExitCode::SUCCESS
        }
        Ok(FormatChange::Moved(now)) => {
            eprintln!(
                "lockgate format {how}: refused: the format in use changed to {now} meanwhile; look again"
            );
            ExitCode::FAILURE
        }
        Ok(FormatChange::Refused {
            instance,
            version,
            writes,
        }) => {
            eprintln!(
                "lockgate format {how}: refused: instance {instance} ({version}) writes formats {writes}, not {to}"
            );
            ExitCode::FAILURE
        }
        Err(err) => unreadable(&err.to_string()),
    }
}

fn connect(mut args: RedisArgs) -> Result<(crate::redis::Redis, String), String> {
    args.read_secret_files()?;
    let prefix = args.key_prefix.clone();
    Ok((plain_redis(&args)?, prefix))
}

/// Redis could not be read: exit 3 (2 is a usage error's, as clap exits).
fn unreadable(err: &str) -> ExitCode {
    eprintln!("lockgate format: cannot read the fleet's record in Redis: {err}");
    ExitCode::from(3)
}

fn print_status(status: &Status, as_json: bool) {
    let fleet = &status.fleet;
    let raise = describe(&operator::plan_raise(status, None, false));
    let lower = describe(&operator::plan_lower(status, None));
    if as_json {
        let instances: Vec<_> = fleet
            .instances
            .iter()
            .map(|instance| {
                json!({
                    "id": instance.id,
                    "version": instance.version,
                    "formats": {"reads": instance.reads, "writes": instance.writes},
                    "started_at_ms": instance.started_at_ms,
                    "address": instance.address,
                    "library": instance.library,
                    "seen_at_ms": instance.seen_at_ms,
                })
            })
            .collect();
        let document = json!({
            "format_in_use": fleet.format,
            "migrations": fleet.migrations,
            "instances": instances,
            "unnamed_libraries": status.unnamed,
            "raise": raise,
            "lower": lower,
            "this_build": {"version": VERSION, "formats": {"reads": READS, "writes": WRITES}},
        });
        println!("{document}");
        return;
    }
    if fleet.format == 0 {
        println!(
            "data format in use: none (the record's format field holds no format: set one with `format raise --to N`)"
        );
    } else {
        println!("data format in use: {}", fleet.format);
    }
    println!("migrations:");
    for change in &fleet.migrations {
        let from = change
            .from
            .map_or_else(|| "-".to_owned(), |from| from.to_string());
        println!(
            "  {}  {from} -> {}  {} by {}",
            utc(change.at_ms),
            change.to,
            change.how,
            change.by
        );
    }
    println!("live instances: {}", fleet.instances.len());
    for instance in &fleet.instances {
        let reads: Vec<String> = instance.reads.iter().map(u32::to_string).collect();
        println!(
            "  {}  {}  reads {}  writes {}..{}  at {}  since {}",
            instance.id,
            instance.version,
            reads.join(","),
            instance.writes[0],
            instance.writes[1],
            instance.address,
            utc(instance.started_at_ms)
        );
    }
    if status.unnamed.is_empty() {
        println!("function libraries no live instance names: none");
    } else {
        println!(
            "function libraries no live instance names: {} (an instance of a release before 0.2.0 may run)",
            status.unnamed.join(", ")
        );
    }
    println!("raise: {raise}");
    println!("lower: {lower}");
}

/// A plan in words.
fn describe(plan: &Plan) -> String {
    match plan {
        Plan::Change { from, to } => format!("would change the format in use from {from} to {to}"),
        Plan::Nothing(why) => format!("nothing to do: {why}"),
        Plan::Refused(why) => format!("refused: {why}"),
    }
}

/// Unix milliseconds as an RFC 3339 UTC time, to the second.
fn utc(ms: u64) -> String {
    let seconds = ms / 1000;
    let (days, of_day) = (seconds / 86_400, seconds % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn times_read_as_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_215_200_500), "2026-12-02T12:40:00Z");
    }
}
