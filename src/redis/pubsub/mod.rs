//! The instance's pub/sub: subscribes to the channels asked for and reports each message.
//!
//! With one Redis, a single pub/sub connection. In a Redis Cluster, a
//! channel named with a hash tag (a lock's release channel) is a sharded
//! channel, subscribed (`SSUBSCRIBE`) on the node that owns its slot; one
//! without (the sale resets) is a plain channel, which every node relays.

mod cluster;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster::ClusterClientBuilder;
use tokio::sync::{mpsc, oneshot};

use super::sentinel::Primary;
use super::timed_out;

/// A part of the gateway that receives messages: it hears about every
/// message (on the channels it subscribed, and others') and every reconnect.
pub trait Listener: Send + Sync + 'static {
    /// A message arrived on `channel` (possibly one another listener asked for).
    fn message(&self, channel: &str, payload: &[u8]);
    /// The connection was lost and is back, with every channel still asked
    /// for resubscribed; anything published meanwhile was missed.
    fn reconnected(&self);
    /// `channel` alone was (re)subscribed, as the cluster client does after
    /// a node's connection dropped or the slot moved: anything published on
    /// it meanwhile was missed.
    fn resubscribed(&self, channel: &str) {
        let _ = channel;
    }
}

/// Every listener of one instance.
#[derive(Default)]
pub(super) struct Listeners(RwLock<Vec<Arc<dyn Listener>>>);

impl Listeners {
    /// Runs `visit` on every listener, under the read lock: messages arrive
    /// once per release, so no copy of the list is made for each.
    fn each(&self, mut visit: impl FnMut(&dyn Listener)) {
        let listeners = self.0.read().unwrap_or_else(PoisonError::into_inner);
        for listener in listeners.iter() {
            visit(listener.as_ref());
        }
    }
}

/// The channels asked for, each with how many subscriptions want it: a
/// channel is subscribed in Redis while its count is above zero, so one
/// part of the gateway leaving a channel does not take it from another.
#[derive(Default)]
pub(super) struct Subscriptions(HashMap<String, usize>);

impl Subscriptions {
    /// Counts one more subscription; true if the channel is new.
    fn add(&mut self, channel: &str) -> bool {
        let count = self.0.entry(channel.to_owned()).or_default();
        *count += 1;
        *count == 1
    }

    /// Counts one subscription less; true if that was the last.
    fn remove(&mut self, channel: &str) -> bool {
        match self.0.get_mut(channel) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                self.0.remove(channel);
                true
            }
            None => false,
        }
    }

    fn channels(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }

    fn contains(&self, channel: &str) -> bool {
        self.0.contains_key(channel)
    }
}

pub(super) enum Request {
    Subscribe {
        channel: String,
        confirmed: oneshot::Sender<()>,
    },
    Unsubscribe {
        channel: String,
    },
    Stop,
}

/// A handle on the subscription task. Requests are carried out in the order
/// they are made, and counted: every [`Subscriber::subscribe`] is undone by
/// one [`Subscriber::unsubscribe`] of the same channel.
#[derive(Clone)]
pub struct Subscriber {
    requests: mpsc::UnboundedSender<Request>,
    listeners: Arc<Listeners>,
}

/// How often an idle subscription is checked with PING, so a connection that
/// died silently (no RST) is noticed and replaced.
const HEALTH_CHECK: Duration = Duration::from_secs(5);
pub(super) const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);
pub(super) const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);

impl Subscriber {
    /// Starts the task; it runs until [`Subscriber::stop`] or until every
    /// handle is dropped.
    pub fn start(client: Primary, timeout: Duration) -> Self {
        let (requests, inbox) = mpsc::unbounded_channel();
        let listeners = Arc::new(Listeners::default());
        tokio::spawn(run(client, timeout, listeners.clone(), inbox));
        Self {
            requests,
            listeners,
        }
    }

    /// Starts the task for a Redis Cluster (see the module doc).
    pub fn start_cluster(client: ClusterClientBuilder, timeout: Duration) -> Self {
        let (requests, inbox) = mpsc::unbounded_channel();
        let listeners = Arc::new(Listeners::default());
        tokio::spawn(cluster::run(client, timeout, listeners.clone(), inbox));
        Self {
            requests,
            listeners,
        }
    }

    /// Adds a listener. The channels it needs are subscribed as it asks for
    /// them (with [`Subscriber::subscribe`]), and again after every reconnect.
    pub fn listen(&self, listener: Arc<dyn Listener>) {
        self.listeners
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(listener);
    }

    /// Asks for `channel`; the receiver completes once Redis confirmed the
    /// subscription (or is dropped if the connection fell meanwhile, in which
    /// case the reconnect resubscribes and reports `reconnected`). Undo it
    /// with [`Subscriber::unsubscribe`].
    pub fn subscribe(&self, channel: &str) -> oneshot::Receiver<()> {
        let (confirmed, receiver) = oneshot::channel();
        let _ = self.requests.send(Request::Subscribe {
            channel: channel.to_owned(),
            confirmed,
        });
        receiver
    }

    pub fn unsubscribe(&self, channel: &str) {
        let _ = self.requests.send(Request::Unsubscribe {
            channel: channel.to_owned(),
        });
    }

    /// Ends the task and closes the connection.
    pub fn stop(&self) {
        let _ = self.requests.send(Request::Stop);
    }
}

async fn run(
    client: Primary,
    timeout: Duration,
    listeners: Arc<Listeners>,
    mut inbox: mpsc::UnboundedReceiver<Request>,
) {
    let mut wanted = Subscriptions::default();
    let mut backoff = Duration::ZERO;
    let mut first = true;
    loop {
        match connect(&client, timeout, &wanted).await {
            Ok((sink, stream, at)) => {
                if !first {
                    tracing::info!("pub/sub connection re-established");
                    listeners.each(|listener| listener.reconnected());
                }
                first = false;
                let primary = Followed {
                    primary: &client,
                    at,
                };
                let ended = serve(
                    sink,
                    stream,
                    &mut wanted,
                    timeout,
                    &listeners,
                    &mut inbox,
                    primary,
                );
                if ended.await == Ended::Stopped {
                    return;
                }
                tracing::warn!("pub/sub connection lost; reconnecting");
                backoff = Duration::ZERO;
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot open the pub/sub connection; retrying");
                backoff = (backoff * 2).clamp(RECONNECT_BACKOFF_MIN, RECONNECT_BACKOFF_MAX);
            }
        }
        if pause_while_disconnected(backoff, &mut wanted, &mut inbox).await == Ended::Stopped {
            return;
        }
    }
}

/// Sleeps before the next connection attempt, still counting requests: the
/// resubscribe after reconnecting covers every subscribe asked for meanwhile
/// (its confirmation is dropped, so the waiter does not wait for it).
pub(super) async fn pause_while_disconnected(
    pause: Duration,
    wanted: &mut Subscriptions,
    inbox: &mut mpsc::UnboundedReceiver<Request>,
) -> Ended {
    let sleep = tokio::time::sleep(pause);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return Ended::ConnectionLost,
            request = inbox.recv() => match request {
                Some(Request::Stop) | None => return Ended::Stopped,
                Some(Request::Subscribe { channel, .. }) => {
                    wanted.add(&channel);
                }
                Some(Request::Unsubscribe { channel }) => {
                    wanted.remove(&channel);
                }
            },
        }
    }
}

/// Opens the connection and subscribes to every channel still wanted;
/// returns it with the primary's address it reached.
async fn connect(
    primary: &Primary,
    timeout: Duration,
    wanted: &Subscriptions,
) -> redis::RedisResult<(PubSubSink, PubSubStream, Option<(String, u16)>)> {
    let client = primary.client(timeout).await?;
    let at = match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port) => Some((host.clone(), *port)),
        redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
        _ => None,
    };
    let opened = tokio::time::timeout(timeout, client.get_async_pubsub()).await;
    let (mut sink, stream) = opened.map_err(timed_out)??.split();
    let channels = wanted.channels();
    if !channels.is_empty() {
        tokio::time::timeout(timeout, sink.subscribe(&channels))
            .await
            .map_err(timed_out)??;
    }
    Ok((sink, stream, at))
}

/// The primary a pub/sub connection was opened to, to leave it when the
/// sentinels name another (a failover; a fixed address never moves).
struct Followed<'a> {
    primary: &'a Primary,
    at: Option<(String, u16)>,
}

impl Followed<'_> {
    async fn moved(&self, timeout: Duration) -> bool {
        match self.primary.moved_to(timeout).await {
            Some(now) => self.at.as_ref() != Some(&now),
            None => false,
        }
    }
}

#[derive(PartialEq, Eq)]
pub(super) enum Ended {
    ConnectionLost,
    Stopped,
}

async fn serve(
    mut sink: PubSubSink,
    mut stream: PubSubStream,
    wanted: &mut Subscriptions,
    timeout: Duration,
    listeners: &Listeners,
    inbox: &mut mpsc::UnboundedReceiver<Request>,
    primary: Followed<'_>,
) -> Ended {
    let mut health = tokio::time::interval(HEALTH_CHECK);
    health.reset();
    loop {
        tokio::select! {
            message = stream.next() => match message {
                Some(message) => {
                    listeners.each(|listener| listener.message(message.get_channel_name(), message.get_payload_bytes()));
                }
                None => return Ended::ConnectionLost,
            },
            request = inbox.recv() => match request {
                Some(Request::Subscribe { channel, confirmed }) => {
                    if wanted.add(&channel) {
                        let done = tokio::time::timeout(timeout, sink.subscribe(&channel)).await;
                        if !matches!(done, Ok(Ok(()))) {
                            // `confirmed` is dropped: the waiter does not wait
                            // for it, and the reconnect resubscribes.
                            return Ended::ConnectionLost;
                        }
                    }
                    let _ = confirmed.send(());
                }
                Some(Request::Unsubscribe { channel }) => {
                    if wanted.remove(&channel) {
                        let done = tokio::time::timeout(timeout, sink.unsubscribe(&channel)).await;
                        if !matches!(done, Ok(Ok(()))) {
                            return Ended::ConnectionLost;
                        }
                    }
                }
                Some(Request::Stop) | None => return Ended::Stopped,
            },
            _ = health.tick() => {
                // Any reply will do: in RESP2's subscribed mode Redis answers
                // PING with an array (`pong` and an empty message), not the
                // status a plain connection gets, and asking for a string
                // made every check fail and the connection be replaced.
                let pong = tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await;
                if !matches!(pong, Ok(Ok(_))) || primary.moved(timeout).await {
                    return Ended::ConnectionLost;
                }
            }
        }
    }
}
