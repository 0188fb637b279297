//! The real nginx in front of three gateways, from the shipped template, with its files in a temp dir.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::time::Duration;

use tempfile::TempDir;

use super::{eventually, free_port};

/// nginx serving `nginx/lockgate.conf.template` on a free port; stopped when dropped.
pub struct Nginx {
    pub addr: SocketAddr,
    dir: TempDir,
    child: Child,
    /// Whether clients speak TLS to it.
    tls: bool,
}

/// Template parameters a test may set; the rest take `scripts/cluster.sh`'s defaults.
pub struct NginxSettings {
    pub read_timeout: &'static str,
    pub locks_read_timeout: &'static str,
}

impl Default for NginxSettings {
    fn default() -> Self {
        Self {
            read_timeout: "10s",
            locks_read_timeout: "70s",
        }
    }
}

impl Nginx {
    /// nginx in front of the three `upstreams`.
    pub async fn start(upstreams: [SocketAddr; 3], settings: NginxSettings) -> Self {
        Self::start_serving(upstreams, settings, None).await
    }

    /// nginx terminating TLS for clients (HTTP/2 and HTTP/1.1) with
    /// `certs`'s `server.pem` (`scripts/make-certs.sh`), in front of the
    /// three plain-HTTP `upstreams`.
    pub async fn start_tls(upstreams: [SocketAddr; 3], certs: &Path) -> Self {
        Self::start_serving(upstreams, NginxSettings::default(), Some(certs)).await
    }

    async fn start_serving(
        upstreams: [SocketAddr; 3],
        settings: NginxSettings,
        tls: Option<&Path>,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let run_dir = dir.path().to_str().expect("a UTF-8 temp dir").to_owned();
        for sub in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            std::fs::create_dir_all(dir.path().join("tmp").join(sub)).unwrap();
        }
        // Workers started by root drop to an unprivileged user.
        make_open(dir.path());
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let template = include_str!("../../../nginx/lockgate.conf.template");
        let (listen, client_tls) = match tls {
            Some(certs) => (
                format!("{addr} ssl http2"),
                include_str!("../../../nginx/client-tls.conf.template")
                    .replace("@TLS_CERT@", certs.join("server.pem").to_str().unwrap())
                    .replace("@TLS_KEY@", certs.join("server-key.pem").to_str().unwrap()),
            ),
            None => (addr.to_string(), String::new()),
        };
        let config = template
            .replace("# @CLIENT_TLS@", &client_tls)
            .replace("@RUN_DIR@", &run_dir)
            .replace("@LISTEN@", &listen)
            .replace("@UPSTREAM_1@", &upstreams[0].to_string())
            .replace("@UPSTREAM_2@", &upstreams[1].to_string())
            .replace("@UPSTREAM_3@", &upstreams[2].to_string())
            .replace("@REQ_RATE@", "100000")
            .replace("@REQ_BURST@", "100000")
            .replace("@LOCKS_READ_TIMEOUT@", settings.locks_read_timeout)
            .replace("@READ_TIMEOUT@", settings.read_timeout);
        Self::launch(dir, addr, &config, tls.is_some()).await
    }

    /// nginx passing TLS through (its stream module) to the three
    /// `upstreams`, which terminate it: `nginx/lockgate-passthrough.conf.template`.
    pub async fn start_passthrough(upstreams: [SocketAddr; 3]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let run_dir = dir.path().to_str().expect("a UTF-8 temp dir").to_owned();
        make_open(dir.path());
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config = include_str!("../../../nginx/lockgate-passthrough.conf.template")
            .replace("@RUN_DIR@", &run_dir)
            .replace("@LISTEN@", &addr.to_string())
            .replace("@UPSTREAM_1@", &upstreams[0].to_string())
            .replace("@UPSTREAM_2@", &upstreams[1].to_string())
            .replace("@UPSTREAM_3@", &upstreams[2].to_string())
            .replace("@IDLE_TIMEOUT@", "70s")
            .replace(
                "@STREAM_MODULE@",
                "/usr/lib/nginx/modules/ngx_stream_module.so",
            );
        Self::launch(dir, addr, &config, true).await
    }

    async fn launch(dir: TempDir, addr: SocketAddr, config: &str, tls: bool) -> Self {
        let run_dir = dir.path().to_str().expect("a UTF-8 temp dir").to_owned();
        let config_path = dir.path().join("nginx.conf");
        std::fs::write(&config_path, config).unwrap();
        // In a process group of its own, so that stopping it reaches its
        // workers too.
        let child = Command::new(nginx_binary())
            .process_group(0)
            .args(["-p", &run_dir, "-e", &format!("{run_dir}/nginx-error.log")])
            .arg("-c")
            .arg(&config_path)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nginx: `make test` installs it");
        let nginx = Self {
            addr,
            dir,
            child,
            tls,
        };
        let up = eventually(Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(addr).await.is_ok()
        })
        .await;
        assert!(up, "nginx did not start:\n{}", nginx.error_log());
        nginx
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", self.addr, path)
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nginx-error.log")).unwrap_or_default()
    }

    /// What nginx logged of the requests it served.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nginx-access.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    /// Stops nginx as it is meant to stop (SIGTERM: the master ends its
    /// workers, then itself), and kills whatever of its process group is
    /// left after a few seconds. A SIGKILL to the master alone would leave
    /// its workers running, still listening on the test's port.
    fn drop(&mut self) {
        let group = Pid::from_raw(-(self.child.id() as i32));
        let _ = kill(group, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if kill(group, None).is_err() {
                break;
            }
            let _ = self.child.try_wait();
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = kill(group, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

fn make_open(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    let _ = Command::new("chmod")
        .args(["-R", "a+rwx"])
        .arg(dir.join("tmp"))
        .status();
}

fn nginx_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|path| path.is_file())
    });
    on_path.unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"))
}
