//! TLS with rustls (ring, no OpenSSL): PEM files read into the gateway's server settings (TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 by ALPN, client certificates from a CA), a client certificate's names, and client settings for `lockgate run`.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// The TLS versions spoken: 1.2 and 1.3, nothing older.
static VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file (at least one).
pub fn read_certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let unreadable =
        |err: &dyn std::fmt::Display| format!("cannot read the {what} {}: {err}", path.display());
    std::fs::metadata(path).map_err(|err| unreadable(&err))?;
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|err| unreadable(&err))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| unreadable(&err))?;
    if certificates.is_empty() {
        return Err(format!(
            "the {what} {} holds no PEM certificate",
            path.display()
        ));
    }
    Ok(certificates)
}

/// When the first certificate of a PEM file (the gateway's own, before
/// its chain) stops being valid: its notAfter, in Unix seconds.
pub fn not_after(path: &Path, what: &str) -> Result<i64, String> {
    let certificates = read_certificates(path, what)?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&certificates[0])
        .map_err(|err| format!("the {what} {} does not parse: {err}", path.display()))?;
    Ok(parsed.validity().not_after.timestamp())
}

/// The private key of a PEM file.
pub fn read_private_key(path: &Path, what: &str) -> Result<PrivateKeyDer<'static>, String> {
    std::fs::metadata(path)
        .map_err(|err| format!("cannot read the {what} {}: {err}", path.display()))?;
    PrivateKeyDer::from_pem_file(path).map_err(|err| {
        format!(
            "the {what} {} holds no usable PEM private key: {err}",
            path.display()
        )
    })
}

/// CA certificates as a trust store.
pub fn roots(path: &Path, what: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(path, what)? {
        roots
            .add(certificate)
            .map_err(|err| format!("the {what} {} is not a usable CA: {err}", path.display()))?;
    }
    Ok(roots)
}

/// Where the gateway's TLS files are.
#[derive(Debug, Clone)]
pub struct ServerFiles<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    /// With it, clients must present a certificate signed by this CA.
    pub client_ca: Option<&'a Path>,
}

/// The gateway's TLS settings from its files: refused when a file is
/// missing, does not parse, or the key is not the certificate's.
pub fn server_config(files: &ServerFiles<'_>) -> Result<Arc<ServerConfig>, String> {
    let certificates = read_certificates(files.cert, "TLS certificate")?;
    let key = read_private_key(files.key, "TLS key")?;
    let provider = provider();
    let signing_key = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|err| format!("the TLS key {} cannot sign: {err}", files.key.display()))?;
    rustls::sign::CertifiedKey::new(certificates.clone(), signing_key)
        .keys_match()
        .map_err(|_| {
            format!(
                "the TLS key {} is not the key of the certificate {}",
                files.key.display(),
                files.cert.display()
            )
        })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(VERSIONS)
        .map_err(|err| err.to_string())?;
    let builder = match files.client_ca {
        Some(ca) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(ca, "TLS client CA")?),
                provider,
            )
            .build()
            .map_err(|err| format!("the TLS client CA {}: {err}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certificates, key)
        .map_err(|err| format!("the TLS certificate {}: {err}", files.cert.display()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A client certificate's names: its subject's common names, then its DNS
/// subject alternative names.
pub fn certificate_names(certificate: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(certificate) else {
        return Vec::new();
    };
    let mut names: Vec<String> = parsed
        .subject()
        .iter_common_name()
        .filter_map(|name| name.as_str().ok().map(str::to_owned))
        .collect();
    if let Ok(Some(alternatives)) = parsed.subject_alternative_name() {
        for name in &alternatives.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push((*dns).to_owned());
            }
        }
    }
    names
}

/// Client TLS settings: trust `ca` (else nothing: the caller must give a
/// CA), and present `identity` (certificate and key files) when given.
pub fn client_config(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<ClientConfig, String> {
    let mut config = client_config_with_roots(roots(ca, "CA bundle")?, identity)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Client TLS settings trusting `roots` (no ALPN), presenting `identity`
/// (certificate and key files) when given.
pub fn client_config_with_roots(
    roots: RootCertStore,
    identity: Option<(&Path, &Path)>,
) -> Result<ClientConfig, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|err| err.to_string())?
        .with_root_certificates(roots);
    match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                read_certificates(cert, "client certificate")?,
                read_private_key(key, "client key")?,
            )
            .map_err(|err| format!("the client certificate {}: {err}", cert.display())),
        None => Ok(builder.with_no_client_auth()),
    }
}
