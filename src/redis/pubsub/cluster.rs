//! The subscription task on a Redis Cluster: sharded subscriptions on the node that owns each channel's slot, renewed when a slot moves.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ProtocolVersion, PushInfo, PushKind};
use tokio::sync::mpsc;

use super::{
    Ended, Listeners, RECONNECT_BACKOFF_MAX, RECONNECT_BACKOFF_MIN, Request, Subscriptions,
    pause_while_disconnected,
};

/// How often a cluster subscription that could not be made is tried again.
const SUBSCRIBE_RETRY: Duration = Duration::from_millis(200);

/// The cluster task: one cluster connection speaking RESP3, whose pushes
/// (messages, and the confirmations of subscriptions the client renews by
/// itself after a node's connection drops) arrive on `pushes`.
pub(super) async fn run(
    client: ClusterClientBuilder,
    timeout: Duration,
    listeners: Arc<Listeners>,
    mut inbox: mpsc::UnboundedReceiver<Request>,
) {
    let (push_sender, mut pushes) = mpsc::unbounded_channel();
    let built = client
        .use_protocol(ProtocolVersion::RESP3)
        .push_sender(push_sender)
        .build();
    let client = match built {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(error = %err, "cannot build the cluster pub/sub client");
            return;
        }
    };
    let mut wanted = Subscriptions::default();
    let Some(connection) = open_cluster(&client, timeout, &mut wanted, &mut inbox).await else {
        return;
    };
    let mut cluster = ClusterSubscriptions {
        // Channels asked for while it connected are subscribed by the retry.
        unsubscribed: wanted.channels().into_iter().collect(),
        wanted,
        connection,
        timeout,
    };
    let mut retry = tokio::time::interval(SUBSCRIBE_RETRY);
    loop {
        tokio::select! {
            push = pushes.recv() => match push {
                Some(push) => {
                    if cluster.dropped(&push) {
                        retry.reset_immediately();
                    }
                    deliver(&listeners, push);
                }
                None => return,
            },
            request = inbox.recv() => match request {
                Some(Request::Stop) | None => return,
                Some(request) => cluster.carry_out(request).await,
            },
            _ = retry.tick(), if !cluster.unsubscribed.is_empty() => cluster.retry().await,
        }
    }
}

/// The cluster task's subscriptions: those asked for, and those of them
/// not standing now.
struct ClusterSubscriptions {
    connection: ClusterConnection,
    wanted: Subscriptions,
    /// Channels wanted but not subscribed: a subscription that failed, or
    /// one the server dropped (a slot moved); tried again until it stands.
    unsubscribed: HashSet<String>,
    timeout: Duration,
}

impl ClusterSubscriptions {
    /// Whether `push` is the server's own unsubscribe of a wanted channel
    /// (a slot moved): the new owner must be asked, or the waiters hear
    /// nothing.
    fn dropped(&mut self, push: &PushInfo) -> bool {
        match dropped_by_server(push) {
            Some(channel) if self.wanted.contains(&channel) => {
                self.unsubscribed.insert(channel);
                true
            }
            _ => false,
        }
    }

    async fn carry_out(&mut self, request: Request) {
        match request {
            Request::Subscribe { channel, confirmed } => {
                if self.wanted.add(&channel)
                    && !subscribe_in_cluster(&mut self.connection, &channel, self.timeout).await
                {
                    // `confirmed` is dropped: the waiter does not wait for
                    // it; when the retry makes the subscription, the
                    // confirmation push tells the listeners.
                    self.unsubscribed.insert(channel);
                    return;
                }
                let _ = confirmed.send(());
            }
            Request::Unsubscribe { channel } => {
                if self.wanted.remove(&channel) && !self.unsubscribed.remove(&channel) {
                    unsubscribe_in_cluster(&mut self.connection, &channel, self.timeout).await;
                }
            }
            Request::Stop => {}
        }
    }

    async fn retry(&mut self) {
        for channel in self.unsubscribed.clone() {
            if subscribe_in_cluster(&mut self.connection, &channel, self.timeout).await {
                self.unsubscribed.remove(&channel);
            }
        }
    }
}

/// Opens the cluster connection, retrying with a back-off while counting
/// the requests made meanwhile; `None` if the task was stopped first.
async fn open_cluster(
    client: &redis::cluster::ClusterClient,
    timeout: Duration,
    wanted: &mut Subscriptions,
    inbox: &mut mpsc::UnboundedReceiver<Request>,
) -> Option<ClusterConnection> {
    let mut backoff = RECONNECT_BACKOFF_MIN;
    loop {
        match tokio::time::timeout(timeout, client.get_async_connection()).await {
            Ok(Ok(connection)) => return Some(connection),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "cannot open the cluster pub/sub connection; retrying")
            }
            Err(_) => tracing::warn!("opening the cluster pub/sub connection timed out; retrying"),
        }
        if pause_while_disconnected(backoff, wanted, inbox).await == Ended::Stopped {
            return None;
        }
        backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
    }
}

/// The channel of a server's own unsubscribe push, as a slot migration
/// sends to every client subscribed to a sharded channel of the slot.
fn dropped_by_server(push: &PushInfo) -> Option<String> {
    match (&push.kind, push.data.first()) {
        (
            PushKind::SUnsubscribe | PushKind::Unsubscribe,
            Some(redis::Value::BulkString(channel)),
        ) => Some(String::from_utf8_lossy(channel).into_owned()),
        _ => None,
    }
}

/// Subscribes `channel` on the cluster: sharded on its slot's node when it
/// has a hash tag, else a plain subscription. False if it could not be made.
async fn subscribe_in_cluster(
    connection: &mut ClusterConnection,
    channel: &str,
    timeout: Duration,
) -> bool {
    let done = if is_sharded(channel) {
        tokio::time::timeout(timeout, connection.ssubscribe(channel)).await
    } else {
        tokio::time::timeout(timeout, connection.subscribe(channel)).await
    };
    let subscribed = matches!(done, Ok(Ok(())));
    if !subscribed {
        tracing::warn!(%channel, "cannot subscribe in the cluster");
    }
    subscribed
}

/// Unsubscribes `channel` on the cluster; a failure leaves a subscription
/// nobody listens to, which costs only the messages it brings.
async fn unsubscribe_in_cluster(
    connection: &mut ClusterConnection,
    channel: &str,
    timeout: Duration,
) {
    let _ = if is_sharded(channel) {
        tokio::time::timeout(timeout, connection.sunsubscribe(channel)).await
    } else {
        tokio::time::timeout(timeout, connection.unsubscribe(channel)).await
    };
}

/// A channel named with a hash tag belongs to one key's slot.
fn is_sharded(channel: &str) -> bool {
    channel.contains('{')
}

fn deliver(listeners: &Listeners, push: PushInfo) {
    let text = |index: usize| match push.data.get(index) {
        Some(redis::Value::BulkString(bytes)) => Some(bytes.as_slice()),
        _ => None,
    };
    match push.kind {
        PushKind::Message | PushKind::SMessage => {
            if let (Some(channel), Some(payload)) = (text(0), text(1)) {
                let channel = String::from_utf8_lossy(channel);
                listeners.each(|listener| listener.message(&channel, payload));
            }
        }
        PushKind::Subscribe | PushKind::SSubscribe => {
            if let Some(channel) = text(0) {
                let channel = String::from_utf8_lossy(channel);
                listeners.each(|listener| listener.resubscribed(&channel));
            }
        }
        _ => {}
    }
}
