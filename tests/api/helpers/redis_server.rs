//! The test's own Redis: real `redis-server` processes on free ports, a single node or a three-master cluster, killed when dropped.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::{eventually, free_port, send_signal};

/// A lock script as the gateway loads it: the lock libraries, then the
/// script's own file (`acquire.lua`).
pub fn lock_script(file: &str) -> String {
    let lua = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
    [
        "lib/base.lua",
        "lib/plain.lua",
        "lib/events.lua",
        "lib/holders.lua",
        "lib/modes.lua",
        "lib/queue.lua",
        file,
    ]
    .iter()
    .map(|part| std::fs::read_to_string(format!("{lua}/{part}")).unwrap())
    .collect()
}

/// The Redis keys of lock `key` under the key prefix `namespace`, in the
/// order every lock script takes them.
pub fn lock_keys(namespace: &str, key: &str) -> Vec<String> {
    [
        "lock", "fence", "holders", "queue", "waiters", "watch", "events", "gone",
    ]
    .iter()
    .map(|name| format!("{namespace}{name}:{{{key}}}"))
    .collect()
}

/// The test's own Redis: one `redis-server`, or a three-master Redis Cluster
/// (`RedisServer::cluster`, or every `start()` when `LOCKGATE_TEST_REDIS` is
/// `cluster`). Killed when dropped.
pub struct RedisServer {
    nodes: Vec<Node>,
    cluster: bool,
}

/// One `redis-server` process.
pub struct Node {
    pub port: u16,
    dir: TempDir,
    args: Vec<String>,
    child: Option<Child>,
    /// With TLS only: the directory of `scripts/make-certs.sh`'s files.
    tls: Option<PathBuf>,
}

impl Node {
    fn new(port: u16, args: Vec<String>) -> Self {
        Self {
            port,
            dir: tempfile::tempdir().expect("temp dir"),
            args,
            child: None,
            tls: None,
        }
    }

    /// The flags of a node that speaks TLS only, on its port, and requires
    /// a client certificate signed by the CA.
    fn listen_flags(&self) -> Vec<String> {
        let port = self.port.to_string();
        let Some(certs) = &self.tls else {
            return vec!["--port".into(), port];
        };
        let file = |name: &str| certs.join(name).to_string_lossy().into_owned();
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port,
            "--tls-cert-file".into(),
            file("server.pem"),
            "--tls-key-file".into(),
            file("server-key.pem"),
            "--tls-ca-cert-file".into(),
            file("ca.pem"),
            "--tls-auth-clients".into(),
            "yes".into(),
        ]
    }

    async fn spawn(&mut self) -> bool {
        let mut command = Command::new(redis_server_binary());
        command
            .args(&self.args)
            .args(self.listen_flags())
            .args(["--bind", "127.0.0.1"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(command.spawn().expect("spawn redis-server"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && child.try_wait().ok().flatten().is_some()
            {
                return false;
            }
            if self.ping().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    async fn ping(&self) -> bool {
        match self.client().get_multiplexed_async_connection().await {
            Ok(mut conn) => redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .is_ok(),
            Err(_) => false,
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// A client of the test's own (over TLS, with the server's certificate,
    /// which may act as a client's too).
    pub fn client(&self) -> redis::Client {
        match &self.tls {
            Some(certs) => redis::Client::build_with_tls(
                self.url(),
                redis::TlsCertificates {
                    client_tls: Some(redis::ClientTlsConfig {
                        client_cert: std::fs::read(certs.join("server.pem")).unwrap(),
                        client_key: std::fs::read(certs.join("server-key.pem")).unwrap(),
                    }),
                    root_cert: Some(std::fs::read(certs.join("ca.pem")).unwrap()),
                },
            )
            .expect("redis tls url"),
            None => redis::Client::open(self.url()).expect("redis url"),
        }
    }

    /// A connection to this node alone.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis")
    }

    /// Stops the node abruptly (SIGKILL): no final save, like a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the node again on the same port and directory.
    pub async fn restart(&mut self) {
        self.kill();
        assert!(self.spawn().await, "redis-server did not restart");
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a running redis-server").id()
    }
}

impl Node {
    /// A fresh node started for a Redis Cluster, on free ports; over TLS
    /// (the cluster bus too) with `tls`'s certificates.
    async fn cluster_node(tls: Option<&Path>) -> Self {
        loop {
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                "--cluster-require-full-coverage",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ];
            if tls.is_some() {
                args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"]);
            }
            let mut node = Node::new(
                cluster_port(),
                args.iter().map(|arg| (*arg).to_owned()).collect(),
            );
            node.tls = tls.map(Path::to_path_buf);
            if node.spawn().await {
                return node;
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

impl RedisServer {
    /// A throwaway Redis with persistence off (a cluster when
    /// `LOCKGATE_TEST_REDIS=cluster`).
    pub async fn start() -> Self {
        if std::env::var("LOCKGATE_TEST_REDIS").is_ok_and(|mode| mode == "cluster") {
            return Self::cluster(3).await;
        }
        Self::start_single().await
    }

    /// A throwaway single Redis with persistence off, whatever
    /// `LOCKGATE_TEST_REDIS` says (for tests that freeze or restart it).
    pub async fn start_single() -> Self {
        Self::start_single_with(&[]).await
    }

    /// [`RedisServer::start_single`] with more `redis-server` flags.
    pub async fn start_single_with(flags: &[&str]) -> Self {
        let mut args: Vec<String> = ["--save", "", "--appendonly", "no"]
            .iter()
            .map(|arg| (*arg).to_owned())
            .collect();
        args.extend(flags.iter().map(|flag| (*flag).to_owned()));
        Self::single(args).await
    }

    /// A Redis with the shipped `redis/redis.conf`: every write is in the
    /// fsynced AOF before it is answered, so a restart (even after SIGKILL)
    /// comes back with everything acknowledged.
    pub async fn start_with_aof() -> Self {
        // The configuration file must come first on the command line.
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/redis/redis.conf");
        Self::single(vec![config.into()]).await
    }

    /// A replica of `primary`, persistence off.
    pub async fn replica_of(primary: &RedisServer) -> Self {
        let port = primary.node(0).port.to_string();
        let args = [
            "--save",
            "",
            "--appendonly",
            "no",
            "--replicaof",
            "127.0.0.1",
            &port,
        ];
        Self::single(args.iter().map(|arg| (*arg).to_owned()).collect()).await
    }

    /// A single Redis that speaks TLS only and requires a client
    /// certificate, with the files `scripts/make-certs.sh` made in `certs`
    /// (`gateway.pem` among them, for the gateway).
    pub async fn start_tls(certs: &Path) -> Self {
        let args = ["--save", "", "--appendonly", "no"];
        Self::single_with_tls(
            args.iter().map(|arg| (*arg).to_owned()).collect(),
            Some(certs),
        )
        .await
    }

    async fn single(args: Vec<String>) -> Self {
        Self::single_with_tls(args, None).await
    }

    async fn single_with_tls(args: Vec<String>, tls: Option<&Path>) -> Self {
        for _ in 0..5 {
            // Another process may take the port between choosing and binding
            // it; then try another.
            let mut node = Node::new(free_port(), args.clone());
            node.tls = tls.map(Path::to_path_buf);
            if node.spawn().await {
                return Self {
                    nodes: vec![node],
                    cluster: false,
                };
            }
        }
        panic!("redis-server did not start");
    }

    /// A Redis Cluster of `masters` masters without replicas. A master that
    /// stops takes only its own slots with it (full coverage is not required).
    pub async fn cluster(masters: usize) -> Self {
        Self::cluster_with_tls(masters, None).await
    }

    /// [`RedisServer::cluster`] over TLS only, the cluster bus too
    /// (`tls-cluster`), client certificates required, with the files of
    /// [`RedisServer::start_tls`].
    pub async fn cluster_tls(masters: usize, certs: &Path) -> Self {
        Self::cluster_with_tls(masters, Some(certs)).await
    }

    async fn cluster_with_tls(masters: usize, tls: Option<&Path>) -> Self {
        let mut nodes = Vec::new();
        while nodes.len() < masters {
            nodes.push(Node::cluster_node(tls).await);
        }
        let tls_flags: Vec<String> = match tls {
            Some(certs) => {
                let file = |name: &str| certs.join(name).to_string_lossy().into_owned();
                vec![
                    "--tls".into(),
                    "--cacert".into(),
                    file("ca.pem"),
                    "--cert".into(),
                    file("server.pem"),
                    "--key".into(),
                    file("server-key.pem"),
                ]
            }
            None => Vec::new(),
        };
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(&tls_flags)
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run redis-cli --cluster create");
        assert!(created.success(), "redis-cli --cluster create failed");
        let server = Self {
            nodes,
            cluster: true,
        };
        let ready = eventually(Duration::from_secs(20), || server.cluster_ready()).await;
        assert!(ready, "the cluster did not become ready");
        server
    }

    /// Adds a replica of master `master` to the cluster, and waits until it
    /// has caught up. It joins the nodes (as the last one).
    pub async fn add_cluster_replica(&mut self, master: usize) {
        let replica = Node::cluster_node(self.node(0).tls.as_deref()).await;
        let mut conn = replica.connection().await;
        let () = redis::cmd("CLUSTER")
            .arg("MEET")
            .arg("127.0.0.1")
            .arg(self.node(master).port)
            .query_async(&mut conn)
            .await
            .unwrap();
        let master_id: String = redis::cmd("CLUSTER")
            .arg("MYID")
            .query_async(&mut self.node(master).connection().await)
            .await
            .unwrap();
        // The replica must know the master before it can replicate it.
        let replicating = eventually(Duration::from_secs(20), || async {
            let mut conn = replica.connection().await;
            let done: redis::RedisResult<()> = redis::cmd("CLUSTER")
                .arg("REPLICATE")
                .arg(&master_id)
                .query_async(&mut conn)
                .await;
            done.is_ok()
        })
        .await;
        assert!(replicating, "the new node did not become a replica");
        let synced = eventually(Duration::from_secs(20), || async {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut replica.connection().await)
                .await
                .unwrap_or_default();
            info.contains("master_link_status:up")
        })
        .await;
        assert!(synced, "the replica did not sync");
        self.nodes.push(replica);
        let ready = eventually(Duration::from_secs(20), || self.cluster_ready()).await;
        assert!(ready, "the cluster did not become ready again");
    }

    /// A lock key for each of the first `masters` masters, in node order:
    /// keys that lockgate stores on that master.
    pub async fn one_key_per_master(&self, masters: usize) -> Vec<String> {
        let mut found: HashMap<usize, String> = HashMap::new();
        for candidate in 0.. {
            let key = format!("spread:{candidate}");
            if let Some(index) = self.master_of(&key).await.filter(|index| *index < masters) {
                found.entry(index).or_insert(key);
            }
            if found.len() == masters {
                break;
            }
        }
        (0..masters).map(|index| found[&index].clone()).collect()
    }

    /// `count` lock keys that lockgate stores on master `index`.
    pub async fn keys_on_master(&self, index: usize, count: usize) -> Vec<String> {
        let mut keys = Vec::new();
        for candidate in 0.. {
            let key = format!("on-{index}:{candidate}");
            if self.master_of(&key).await == Some(index) {
                keys.push(key);
                if keys.len() == count {
                    break;
                }
            }
        }
        keys
    }

    /// Which node (by index) owns the slot of lock `key`'s Redis keys.
    async fn master_of(&self, key: &str) -> Option<usize> {
        let slot_key = format!("lockgate:lock:{{{key}}}");
        let mut conn = self.node(0).connection().await;
        // A node answers KEYSLOT for any key; CLUSTER COUNTKEYSINSLOT tells
        // nothing of ownership, so ask the slot table.
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&slot_key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let owned: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await
            .unwrap();
        let owner_port = owned.iter().find_map(|range| {
            let start = redis::from_redis_value::<u16>(range[0].clone()).ok()?;
            let end = redis::from_redis_value::<u16>(range[1].clone()).ok()?;
            let master: Vec<redis::Value> = redis::from_redis_value(range[2].clone()).ok()?;
            let port = redis::from_redis_value::<u16>(master[1].clone()).ok()?;
            (start..=end).contains(&slot).then_some(port)
        })?;
        self.nodes.iter().position(|node| node.port == owner_port)
    }

    /// Every node sees the cluster as whole.
    async fn cluster_ready(&self) -> bool {
        for node in &self.nodes {
            let Ok(mut conn) = node.client().get_multiplexed_async_connection().await else {
                return false;
            };
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            if !info.contains("cluster_state:ok") {
                return false;
            }
        }
        true
    }

    pub fn node(&self, index: usize) -> &Node {
        &self.nodes[index]
    }

    pub fn node_mut(&mut self, index: usize) -> &mut Node {
        &mut self.nodes[index]
    }

    /// The flags that point a gateway at this Redis (over TLS: with the
    /// CA and the `gateway` client certificate).
    pub fn gateway_flags(&self) -> Vec<String> {
        let mut flags = if self.cluster {
            let nodes: Vec<String> = self.nodes.iter().map(Node::url).collect();
            vec!["--redis-cluster-nodes".into(), nodes.join(",")]
        } else {
            vec!["--redis-url".into(), self.url()]
        };
        if let Some(certs) = &self.node(0).tls {
            let file = |name: &str| certs.join(name).to_string_lossy().into_owned();
            flags.extend([
                "--redis-tls-ca".into(),
                file("ca.pem"),
                "--redis-tls-cert".into(),
                file("gateway.pem"),
                "--redis-tls-key".into(),
                file("gateway-key.pem"),
            ]);
        }
        flags
    }

    /// Names lock `key`'s Redis keys under `namespace`, and the arguments
    /// every lock script takes first, as the gateway does.
    fn bind_lock(&self, invocation: &mut redis::ScriptInvocation<'_>, namespace: &str, key: &str) {
        for name in lock_keys(namespace, key) {
            invocation.key(name);
        }
        let publish = if self.cluster { "SPUBLISH" } else { "PUBLISH" };
        invocation.arg(publish).arg(namespace).arg(key);
    }

    /// Takes a lock straight in Redis with the gateway's own `acquire.lua`,
    /// under the Redis key prefix `namespace` (`lockgate:` for the locks of
    /// `/locks`): for locks no client can take over HTTP. Returns the token.
    pub async fn take_lock(&self, namespace: &str, key: &str, ttl_ms: u64) -> String {
        let token = uuid::Uuid::new_v4().to_string();
        let script = redis::Script::new(&lock_script("acquire.lua"));
        let mut invocation = script.prepare_invoke();
        self.bind_lock(&mut invocation, namespace, key);
        invocation
            .arg(&token)
            .arg("exclusive")
            .arg(1)
            .arg(ttl_ms)
            .arg("0")
            .arg(60_000)
            .arg(0)
            .arg("")
            .arg("test")
            .arg("0")
            .arg("0")
            .arg("")
            .arg("")
            .arg("");
        let reply: Vec<String> = invocation
            .invoke_async(&mut self.connection().await)
            .await
            .unwrap();
        assert_eq!(reply[0], "granted", "{key} was not granted: {reply:?}");
        token
    }

    /// Releases a lock taken with [`RedisServer::take_lock`], with the
    /// gateway's own `release.lua` (which tells the waiters).
    pub async fn release_lock(&self, namespace: &str, key: &str, token: &str) {
        let script = redis::Script::new(&lock_script("release.lua"));
        let mut invocation = script.prepare_invoke();
        self.bind_lock(&mut invocation, namespace, key);
        invocation.arg(token).arg("one").arg(60_000);
        let reply: Vec<String> = invocation
            .invoke_async(&mut self.connection().await)
            .await
            .unwrap();
        assert_eq!(reply[0], "released", "{key} was not released: {reply:?}");
    }

    /// `CLIENT LIST` of the one Redis (the node the test's connection
    /// reaches, for a cluster): a line per connection, this query's own
    /// among them (`cmd=client`).
    pub async fn client_list(&self) -> String {
        redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut self.connection().await)
            .await
            .unwrap()
    }

    /// The [`client_list`](Self::client_list) lines of every connection but
    /// this query's own: the gateway's, when nothing else is connected.
    pub async fn other_clients(&self) -> Vec<String> {
        self.client_list()
            .await
            .lines()
            .filter(|line| !line.contains("cmd=client"))
            .map(str::to_owned)
            .collect()
    }

    /// The one Redis's URL (the first node's, for a cluster).
    pub fn url(&self) -> String {
        self.node(0).url()
    }

    /// A connection of the test's own, beside the gateway's: to the one
    /// Redis, or to the whole cluster (commands routed by key).
    pub async fn connection(&self) -> TestConnection {
        if self.cluster {
            let urls: Vec<String> = self.nodes.iter().map(Node::url).collect();
            let mut builder = redis::cluster::ClusterClientBuilder::new(urls);
            if let Some(certs) = &self.node(0).tls {
                builder = builder.certs(redis::TlsCertificates {
                    client_tls: Some(redis::ClientTlsConfig {
                        client_cert: std::fs::read(certs.join("server.pem")).unwrap(),
                        client_key: std::fs::read(certs.join("server-key.pem")).unwrap(),
                    }),
                    root_cert: Some(std::fs::read(certs.join("ca.pem")).unwrap()),
                });
            }
            let client = builder.build().expect("cluster client");
            TestConnection::Cluster(
                client
                    .get_async_connection()
                    .await
                    .expect("connect to the cluster"),
            )
        } else {
            TestConnection::Single(self.node(0).connection().await)
        }
    }

    /// Stops the (single) server abruptly (SIGKILL): no final save, like a crash.
    pub fn kill(&mut self) {
        self.single_node().kill();
    }

    /// Starts the (single) server again on the same port and directory.
    pub async fn restart(&mut self) {
        self.single_node().restart().await;
    }

    /// Freezes the (single) server (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        assert!(!self.cluster, "this test needs a single Redis");
        send_signal(self.node(0).pid(), "-STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        assert!(!self.cluster, "this test needs a single Redis");
        send_signal(self.node(0).pid(), "-CONT");
    }

    fn single_node(&mut self) -> &mut Node {
        assert!(!self.cluster, "this test needs a single Redis");
        &mut self.nodes[0]
    }
}

/// Calls per command, from `INFO commandstats` (summed over every node of a
/// cluster), keyed by the command's name as Redis writes it (`evalsha`,
/// `cluster|info`).
pub async fn command_calls(redis: &RedisServer) -> HashMap<String, u64> {
    let reply: redis::Value = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    let pages: Vec<String> = match reply {
        // A cluster answers with one page per node.
        redis::Value::Map(nodes) => nodes
            .into_iter()
            .map(|(_, page)| redis::from_redis_value(page).unwrap())
            .collect(),
        page => vec![redis::from_redis_value(page).unwrap()],
    };
    let mut calls = HashMap::new();
    for line in pages.iter().flat_map(|page| page.lines()) {
        let Some((name, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|line| line.split_once(':'))
        else {
            continue;
        };
        let count = stats
            .split("calls=")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|count| count.parse::<u64>().ok())
            .unwrap_or(0);
        *calls.entry(name.to_owned()).or_default() += count;
    }
    calls
}

/// A test's own connection: to one Redis or to a cluster.
#[derive(Clone)]
pub enum TestConnection {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for TestConnection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// A port for a cluster node: it and its bus port (10 000 higher) are free.
fn cluster_port() -> u16 {
    loop {
        let port: u16 = 20_000 + (std::process::id() as u16 % 97) * 100 + rand_small();
        let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
}

/// A small pseudo-random number, from the clock.
fn rand_small() -> u16 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |time| time.subsec_nanos())
        % 100) as u16
}

fn redis_server_binary() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("redis-server"))
            .find(|path| path.is_file())
    });
    found.expect("redis-server is not installed: `make test` installs it")
}
