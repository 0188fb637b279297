//! Where the one Redis is: a fixed address (`redis://`), or a primary named by Redis Sentinel (`redis+sentinel://`), asked of the sentinels whenever a connection is opened, so that the gateway follows a failover.
//!
//! `redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]`
//! names the sentinels and the service (the form redis-rs and other clients
//! use); a password is the primary's. `rediss+sentinel://` speaks TLS to
//! the sentinels and to the primary they name (see `RedisTls`). Connections to a primary that was
//! demoted are dropped at its first `READONLY` answer (see
//! `Connection`), and the pub/sub connection checks the sentinels' answer
//! at every health check, so both move to the new primary.

use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind, RedisError, RedisResult};

use super::timed_out;
use super::tls::{self, RedisTls};

/// Where the primary is.
// Made once per pool, so the size of a client with TLS support is no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum Primary {
    Fixed(redis::Client),
    Sentinel(Arc<Sentinels>),
}

/// The sentinels to ask, and what to ask them for.
pub struct Sentinels {
    addresses: Vec<(String, u16)>,
    service: String,
    /// `redis://[auth@]` (`rediss://` with TLS) for the primary, to which
    /// its address is added.
    auth: String,
    /// `redis` or `rediss`, for the sentinels.
    scheme: &'static str,
    tls: Option<RedisTls>,
    /// `/db`, or empty.
    db: String,
}

impl Primary {
    pub fn from_url(url: &str, tls: Option<&RedisTls>) -> RedisResult<Self> {
        if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            return Ok(Self::Sentinel(Arc::new(Sentinels::parse(
                rest, "redis", tls,
            )?)));
        }
        if let Some(rest) = url.strip_prefix("rediss+sentinel://") {
            return Ok(Self::Sentinel(Arc::new(Sentinels::parse(
                rest, "rediss", tls,
            )?)));
        }
        Ok(Self::Fixed(tls::client(url, tls)?))
    }

    /// A client for the primary as it is now.
    pub async fn client(&self, timeout: Duration) -> RedisResult<redis::Client> {
        match self {
            Self::Fixed(client) => Ok(client.clone()),
            Self::Sentinel(sentinels) => {
                let (host, port) = sentinels.primary(timeout).await?;
                tls::client(&sentinels.url_of(&host, port), sentinels.tls.as_ref())
            }
        }
    }

    /// The primary's address as the sentinels give it now; `None` for a
    /// fixed address (it never moves).
    pub async fn moved_to(&self, timeout: Duration) -> Option<(String, u16)> {
        match self {
            Self::Fixed(_) => None,
            Self::Sentinel(sentinels) => sentinels.primary(timeout).await.ok(),
        }
    }
}

impl Sentinels {
    fn parse(rest: &str, scheme: &'static str, tls: Option<&RedisTls>) -> RedisResult<Self> {
        let invalid = |why: &'static str| RedisError::from((ErrorKind::InvalidClientConfig, why));
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((auth, rest)) => (format!("{auth}@"), rest),
            None => (String::new(), rest),
        };
        let (hosts, path) = rest
            .split_once('/')
            .ok_or_else(|| invalid("a redis+sentinel:// URL names its service: .../service"))?;
        let (service, db) = match path.split_once('/') {
            Some((service, db)) => {
                if db.parse::<u16>().is_err() {
                    return Err(invalid(
                        "after the service, only a database number: .../service/2",
                    ));
                }
                (service, format!("/{db}"))
            }
            None => (path, String::new()),
        };
        if service.is_empty() {
            return Err(invalid(
                "a redis+sentinel:// URL names its service: .../service",
            ));
        }
        let addresses = hosts
            .split(',')
            .map(|host| {
                // `[::1]:26379`, `[::1]`, `s1:26379` or `s1`.
                let (name, port) = match host.strip_prefix('[') {
                    Some(rest) => {
                        let (name, after) = rest
                            .split_once(']')
                            .ok_or_else(|| invalid("an IPv6 sentinel is written [address]:port"))?;
                        (name, after.strip_prefix(':').unwrap_or("26379"))
                    }
                    None => host.rsplit_once(':').unwrap_or((host, "26379")),
                };
                let port = port
                    .parse::<u16>()
                    .map_err(|_| invalid("a sentinel's port is a number"))?;
                if name.is_empty() {
                    return Err(invalid(
                        "a redis+sentinel:// URL names at least one sentinel",
                    ));
                }
                let name = if name.contains(':') {
                    format!("[{name}]")
                } else {
                    name.to_owned()
                };
                // The address as a client would use it: refused now, not at the first request.
                redis::Client::open(format!("redis://{name}:{port}"))
                    .map_err(|_| invalid("a sentinel's address is host:port"))?;
                Ok((name, port))
            })
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(Self {
            addresses,
            service: service.to_owned(),
            auth: format!("{scheme}://{auth}"),
            scheme,
            tls: tls.cloned(),
            db,
        })
    }

    fn url_of(&self, host: &str, port: u16) -> String {
        format!("{}{host}:{port}{}", self.auth, self.db)
    }

    /// Asks each sentinel in turn for the service's primary; the first
    /// answer wins.
    async fn primary(&self, timeout: Duration) -> RedisResult<(String, u16)> {
        let mut last = RedisError::from((ErrorKind::Io, "no sentinel answered"));
        for (host, port) in &self.addresses {
            let asked = tokio::time::timeout(timeout, self.ask(host, *port)).await;
            match asked.map_err(timed_out).and_then(|answer| answer) {
                Ok(Some(primary)) => return Ok(primary),
                Ok(None) => {
                    last = RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "the sentinel knows no such service",
                    ));
                }
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    async fn ask(&self, host: &str, port: u16) -> RedisResult<Option<(String, u16)>> {
        let client = tls::client(
            &format!("{}://{host}:{port}", self.scheme),
            self.tls.as_ref(),
        )?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.service)
            .query_async(&mut conn)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_the_sentinels_the_service_and_the_primarys_password() {
        let Primary::Sentinel(sentinels) = Primary::from_url(
            "redis+sentinel://:secret@s1:26379,s2:26380,s3/mymaster/2",
            None,
        )
        .unwrap() else {
            panic!("not a sentinel URL");
        };
        assert_eq!(
            sentinels.addresses,
            [
                ("s1".to_owned(), 26379),
                ("s2".to_owned(), 26380),
                ("s3".to_owned(), 26379)
            ]
        );
        assert_eq!(sentinels.service, "mymaster");
        assert_eq!(
            sentinels.url_of("10.0.0.5", 6379),
            "redis://:secret@10.0.0.5:6379/2"
        );
    }

    #[test]
    fn a_sentinel_url_without_a_service_is_refused() {
        for url in [
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:26379/",
            "redis+sentinel:///m",
        ] {
            assert!(Primary::from_url(url, None).is_err(), "{url}");
        }
    }
}
