//! TLS to Redis (`rediss://`): the CA to trust and the client certificate to present, for every connection the gateway opens to one Redis, a Cluster's nodes, and the sentinels.

use std::path::Path;
use std::sync::Arc;

use redis::{ClientTlsConfig, RedisResult, TlsCertificates};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The files of `--redis-tls-ca`, `--redis-tls-cert` and `--redis-tls-key`,
/// read once at start-up.
#[derive(Clone)]
pub struct RedisTls {
    /// For the connections redis-rs opens itself: pub/sub, the Cluster's,
    /// the sentinels'.
    certificates: TlsCertificates,
    /// For the pool's connections, whose TLS stream the gateway opens
    /// itself so that it sees the socket close (see `LeanManager`).
    client: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("private_ca", &self.certificates.root_cert.is_some())
            .field(
                "client_certificate",
                &self.certificates.client_tls.is_some(),
            )
            .finish()
    }
}

impl RedisTls {
    /// Reads and checks the files: refused, naming the file, when one is
    /// missing or does not parse, or the key is not the certificate's.
    /// Without a CA, the system's CAs are trusted.
    pub fn from_files(ca: Option<&Path>, identity: Option<(&Path, &Path)>) -> Result<Self, String> {
        let read = |path: &Path, what: &str| {
            std::fs::read(path)
                .map_err(|err| format!("cannot read the {what} {}: {err}", path.display()))
        };
        let client = match ca {
            Some(ca) => crate::tls::client_config_with_roots(
                crate::tls::roots(ca, "Redis TLS CA")?,
                identity,
            )?,
            None => {
                let mut roots = rustls::RootCertStore::empty();
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                crate::tls::client_config_with_roots(roots, identity)?
            }
        };
        let certificates = TlsCertificates {
            root_cert: ca.map(|ca| read(ca, "Redis TLS CA")).transpose()?,
            client_tls: identity
                .map(|(cert, key)| {
                    Ok::<_, String>(ClientTlsConfig {
                        client_cert: read(cert, "Redis TLS client certificate")?,
                        client_key: read(key, "Redis TLS client key")?,
                    })
                })
                .transpose()?,
        };
        Ok(Self {
            certificates,
            client: Arc::new(client),
        })
    }

    /// The certificates, for a Cluster client.
    pub fn certificates(&self) -> TlsCertificates {
        self.certificates.clone()
    }

    /// A redis-rs client for `url` trusting the CA and presenting the
    /// client certificate (a `redis://` URL stays plain).
    pub fn client(&self, url: &str) -> RedisResult<redis::Client> {
        if is_tls_url(url) {
            redis::Client::build_with_tls(url, self.certificates.clone())
        } else {
            redis::Client::open(url)
        }
    }

    /// The TLS handshake over `stream`, checking the server's certificate
    /// against `host`.
    pub async fn connect(
        &self,
        host: &str,
        stream: TcpStream,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let name = ServerName::try_from(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
        )
        .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err))?;
        TlsConnector::from(self.client.clone())
            .connect(name, stream)
            .await
    }
}

/// A client for `url`, with the TLS settings when there are some.
pub fn client(url: &str, tls: Option<&RedisTls>) -> RedisResult<redis::Client> {
    match tls {
        Some(tls) => tls.client(url),
        None => redis::Client::open(url),
    }
}

/// Whether the URL asks for TLS (`rediss://`, `rediss+sentinel://`).
pub fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss:") || url.starts_with("rediss+") || url.starts_with("valkeys:")
}

/// Whether `err` (or what it wraps) is a TLS handshake refused for a
/// certificate: ours refused by Redis, or Redis's not trusted by us. At
/// start-up that is a setting at fault, not a Redis still starting.
pub fn is_certificate_refusal(err: &(dyn std::error::Error + 'static)) -> bool {
    use rustls::AlertDescription as Alert;
    matches!(
        rustls_error(err),
        Some(
            rustls::Error::InvalidCertificate(_)
                | rustls::Error::NoCertificatesPresented
                | rustls::Error::AlertReceived(
                    Alert::BadCertificate
                        | Alert::UnknownCA
                        | Alert::CertificateRequired
                        | Alert::CertificateUnknown
                        | Alert::UnsupportedCertificate
                        | Alert::HandshakeFailure
                )
        )
    )
}

/// The TLS error under `err`: redis-rs keeps an I/O error in an `Arc`,
/// and an I/O error keeps the TLS error as its payload, not its source.
fn rustls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = err.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    if let Some(inner) = err
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        return rustls_error(inner);
    }
    if let Some(shared) = err.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>() {
        return rustls_error(shared.as_ref());
    }
    err.source().and_then(rustls_error)
}
