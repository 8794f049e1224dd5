//! One translated session: the client's WebSocket (`v5.channel.k8s.io`) on one side, the kubelet's
//! SPDY connection on the other.
//!
//! Three tasks, so that neither direction can hold up the other (a command that stops reading its
//! stdin while its stdout fills must not wedge the session): `input` reads the WebSocket and sends
//! stdin, resize and the stdin CLOSE signal as SPDY frames through a channel to `writer`, which owns
//! the kubelet's write half; `output` (this task) reads SPDY frames and writes stdout/stderr to the
//! WebSocket, collecting the error stream. When the runtime has ended the output streams, the
//! Status goes on the error channel, then a WebSocket close, and the client closes the connection
//! once it has read everything (upstream's `finish`).

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch, Notify};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::channels::{self, Options, StreamIds, CLOSE, ERROR, RESIZE, STDIN};
use super::spdy::{self, Encoder, Frame};

/// How long the client has to close the connection after the Status (upstream's finishTimeout).
const FINISH_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// SPDY frames queued for the kubelet before the WebSocket reader waits.
const QUEUE: usize = 64;

type Ws<S> = WebSocketStream<S>;

/// Runs the session to its end; returns the code the translator counts it under.
pub async fn run<S>(
    ws: Ws<S>,
    opts: Options,
    dial: impl Future<Output = Result<Upgraded, (Value, u16)>>,
) -> u16
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    run_with(ws, opts, async move { dial.await.map(TokioIo::new) }).await
}

/// [`run`] over any kubelet connection (tests use an in-memory pipe).
pub async fn run_with<S, K>(
    ws: Ws<S>,
    opts: Options,
    dial: impl Future<Output = Result<K, (Value, u16)>>,
) -> u16
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    K: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut ws_tx, ws_rx) = ws.split();
    // The empty message on the lowest channel the client reads: the session is set up.
    if ws_tx
        .send(Message::Binary(vec![opts.first_channel()].into()))
        .await
        .is_err()
    {
        return 400;
    }
    let ids = StreamIds::plan(&opts);
    let (to_kubelet, queue) = mpsc::channel::<Vec<u8>>(QUEUE);
    let (ready_tx, ready_rx) = watch::channel(false);
    let gone = Arc::new(Notify::new());
    let input = tokio::spawn(input(
        ws_rx,
        to_kubelet.clone(),
        ready_rx,
        ids,
        gone.clone(),
    ));
    let (status, code) = match dial.await {
        Err(refused) => {
            // No session: the input task stops waiting for one and only reads until the close.
            drop(ready_tx);
            refused
        }
        Ok(kubelet) => {
            tokio::select! {
                r = exchange(kubelet, &mut ws_tx, queue, to_kubelet, ready_tx, ids) => r,
                _ = gone.notified() => (channels::internal("the client closed the connection"), 500),
            }
        }
    };
    finish(ws_tx, input, &status).await;
    code
}

/// The Status on the error channel, the close frame, then wait for the client to close.
async fn finish<S>(
    mut ws_tx: SplitSink<Ws<S>, Message>,
    input: tokio::task::JoinHandle<()>,
    status: &Value,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut msg = vec![ERROR];
    msg.extend(serde_json::to_vec(status).unwrap_or_default());
    let _ = ws_tx.send(Message::Binary(msg.into())).await;
    let _ = ws_tx.send(normal_close()).await;
    if tokio::time::timeout(FINISH_TIMEOUT, input).await.is_err() {
        tracing::debug!("client did not close the connection after the status");
    }
}

/// Client → kubelet: stdin (chunked), resize events, and stdin's half-close (v5's CLOSE signal,
/// or the client going away). Waits for the runtime to accept every stream first: spdystream drops
/// data on a stream it has not replied to. Ends when the client closes the WebSocket.
async fn input<S>(
    mut ws_rx: SplitStream<Ws<S>>,
    to_kubelet: mpsc::Sender<Vec<u8>>,
    mut ready: watch::Receiver<bool>,
    ids: StreamIds,
    gone: Arc<Notify>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Without a session (the kubelet refused) the client's messages are read and dropped.
    let live = ready.wait_for(|r| *r).await.is_ok();
    let mut stdin = ids.stdin.filter(|_| live);
    while let Some(msg) = ws_rx.next().await {
        let data = match msg {
            Ok(Message::Binary(b)) => b,
            // Upstream's wsstream reads every data frame as bytes, whatever its opcode, and clients
            // rely on it: the Python client writes stdin (`\0` + the text) as a text frame.
            Ok(Message::Text(t)) => t.into(),
            Ok(Message::Close(_)) | Err(_) => break,
            // Pings are answered by the WebSocket layer.
            Ok(_) => continue,
        };
        let Some((&channel, rest)) = data.split_first() else {
            continue;
        };
        let mut frames = Vec::new();
        match channel {
            STDIN => {
                if let Some(id) = stdin {
                    frames.extend(
                        rest.chunks(spdy::MAX_DATA)
                            .map(|c| spdy::data(id, false, c)),
                    );
                }
            }
            RESIZE => {
                if let Some(id) = ids.resize.filter(|_| live) {
                    frames.push(spdy::data(id, false, rest));
                }
            }
            CLOSE if rest.first() == Some(&STDIN) => {
                if let Some(id) = stdin.take() {
                    frames.push(spdy::data(id, true, &[]));
                }
            }
            _ => {}
        }
        for f in frames {
            // The kubelet side is gone: keep reading until the client closes.
            let _ = to_kubelet.send(f).await;
        }
    }
    if let Some(id) = stdin {
        let _ = to_kubelet.try_send(spdy::data(id, true, &[]));
    }
    gone.notify_one();
}

/// Opens the streams, then kubelet → client until the runtime ends the output streams (FIN or
/// RST on error, stdout and stderr), a GOAWAY, or the connection ends. Returns the client's Status.
async fn exchange<S, K>(
    kubelet: K,
    ws_tx: &mut SplitSink<Ws<S>, Message>,
    mut queue: mpsc::Receiver<Vec<u8>>,
    to_kubelet: mpsc::Sender<Vec<u8>>,
    ready: watch::Sender<bool>,
    ids: StreamIds,
) -> (Value, u16)
where
    S: AsyncRead + AsyncWrite + Unpin,
    K: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(kubelet);
    let opened = ids.opened();
    let mut enc = Encoder::default();
    for (id, kind) in &opened {
        let frame = match enc.syn_stream(*id, &[("streamtype", kind)]) {
            Ok(f) => f,
            Err(e) => return (channels::internal(&e.to_string()), 500),
        };
        if let Err(e) = wr.write_all(&frame).await {
            return (channels::internal(&format!("open {kind} stream: {e}")), 500);
        }
    }
    let writer = tokio::spawn(async move {
        while let Some(f) = queue.recv().await {
            if wr.write_all(&f).await.is_err() {
                return;
            }
        }
    });
    let outputs: Vec<u32> = [Some(ids.error), ids.stdout, ids.stderr]
        .into_iter()
        .flatten()
        .collect();
    let mut replied = HashSet::new();
    let mut ended = HashSet::new();
    let mut error = Vec::new();
    let result = loop {
        let frame = match spdy::read_frame(&mut rd).await {
            Ok(Some(f)) => f,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e.to_string()),
        };
        match frame {
            Frame::SynReply { stream, fin } => {
                replied.insert(stream);
                if fin {
                    ended.insert(stream);
                }
                if replied.len() == opened.len() {
                    ready.send_replace(true);
                }
            }
            Frame::Data { stream, fin, data } => {
                if stream == ids.error {
                    error.extend_from_slice(&data);
                } else if let Some(channel) = ids.output_channel(stream) {
                    if !data.is_empty() {
                        let mut msg = Vec::with_capacity(1 + data.len());
                        msg.push(channel);
                        msg.extend_from_slice(&data);
                        if let Err(e) = ws_tx.send(Message::Binary(msg.into())).await {
                            break Err(format!("write to client: {e}"));
                        }
                    }
                }
                if fin {
                    ended.insert(stream);
                }
            }
            Frame::Reset { stream, .. } => {
                ended.insert(stream);
            }
            Frame::Ping(id) => {
                let _ = to_kubelet.send(spdy::ping(id)).await;
            }
            Frame::GoAway => break Ok(()),
            Frame::Other => {}
        }
        if outputs.iter().all(|s| ended.contains(s)) {
            break Ok(());
        }
    };
    writer.abort();
    match result {
        Ok(()) => channels::from_runtime(&error),
        Err(e) => (channels::internal(&e), 500),
    }
}

/// A close frame with status 1000: client-go reads only a normal closure as the end of the streams.
fn normal_close() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, DuplexStream};
    use tokio_tungstenite::tungstenite::protocol::Role;

    /// A runtime's side of the SPDY connection, scripted: reads what the translator sends.
    struct FakeRuntime {
        io: DuplexStream,
    }

    /// Control frames' type, and data frames' (stream, flags, payload).
    #[derive(Debug, PartialEq)]
    enum Seen {
        Control(u16),
        Data(u32, u8, Vec<u8>),
    }

    impl FakeRuntime {
        async fn next(&mut self) -> Seen {
            let mut head = [0u8; 8];
            self.io.read_exact(&mut head).await.unwrap();
            let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
            let mut payload = vec![0u8; len];
            self.io.read_exact(&mut payload).await.unwrap();
            if head[0] & 0x80 != 0 {
                Seen::Control(u16::from_be_bytes([head[2], head[3]]))
            } else {
                let id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
                Seen::Data(id, head[4], payload)
            }
        }

        async fn send(&mut self, bytes: &[u8]) {
            self.io.write_all(bytes).await.unwrap();
        }

        async fn reply(&mut self, stream: u32) {
            let mut f = vec![0x80, 3, 0, 2, 0, 0, 0, 6];
            f.extend_from_slice(&stream.to_be_bytes());
            f.extend_from_slice(&[0, 0]);
            self.send(&f).await;
        }

        async fn reset(&mut self, stream: u32) {
            let mut f = vec![0x80, 3, 0, 3, 0, 0, 0, 8];
            f.extend_from_slice(&stream.to_be_bytes());
            f.extend_from_slice(&5u32.to_be_bytes());
            self.send(&f).await;
        }
    }

    /// `echo hi | kubectl exec -i pod -- cat`, then exit 3: stdin arrives, the CLOSE signal
    /// half-closes it, stdout comes back on channel 1 and the exit code as a Status on 3.
    #[tokio::test]
    async fn stdin_close_output_and_exit_code() {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let (kubelet_io, runtime_io) = tokio::io::duplex(1 << 16);
        let opts = Options {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let server = tokio::spawn(async move {
            let ws = WebSocketStream::from_raw_socket(server_io, Role::Server, None).await;
            run_with(ws, opts, async move { Ok(kubelet_io) }).await
        });
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        let mut runtime = FakeRuntime { io: runtime_io };

        // The session-is-up message on stdout.
        assert_eq!(
            client.next().await.unwrap().unwrap(),
            Message::Binary(vec![1].into())
        );
        // error, stdin, stdout, stderr opened in client-go's order.
        for _ in 0..4 {
            assert_eq!(runtime.next().await, Seen::Control(1));
        }
        for id in [1, 3, 5, 7] {
            runtime.reply(id).await;
        }
        client
            .send(Message::Binary(b"\0hi\n".to_vec().into()))
            .await
            .unwrap();
        client
            .send(Message::Binary(vec![255, 0].into()))
            .await
            .unwrap();
        assert_eq!(runtime.next().await, Seen::Data(3, 0, b"hi\n".to_vec()));
        assert_eq!(runtime.next().await, Seen::Data(3, 1, vec![]));
        // The runtime pings; the translator answers.
        runtime.send(&spdy::ping(2)).await;
        assert_eq!(runtime.next().await, Seen::Control(6));

        runtime.send(&spdy::data(5, false, b"hi\n")).await;
        runtime.send(&spdy::data(7, false, b"warn")).await;
        let status = br#"{"metadata":{},"status":"Failure","message":"exit","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        runtime.send(&spdy::data(1, false, status)).await;
        for id in [1, 3, 5, 7] {
            runtime.reset(id).await;
        }
        assert_eq!(
            client.next().await.unwrap().unwrap(),
            Message::Binary(b"\x01hi\n".to_vec().into())
        );
        assert_eq!(
            client.next().await.unwrap().unwrap(),
            Message::Binary(b"\x02warn".to_vec().into())
        );
        let Message::Binary(err) = client.next().await.unwrap().unwrap() else {
            panic!("expected the status")
        };
        assert_eq!(err[0], 3);
        let status: Value = serde_json::from_slice(&err[1..]).unwrap();
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(status["details"]["causes"][0]["message"], "3");
        // A normal closure (1000): client-go treats any other close as a broken stream.
        assert!(matches!(
            client.next().await.unwrap().unwrap(),
            Message::Close(Some(f)) if f.code == CloseCode::Normal
        ));
        // The client answers the close; the session ends and counts as 200.
        drop(client);
        assert_eq!(server.await.unwrap(), 200);
    }

    /// A kubelet that refuses: its Status goes to the client on the error channel.
    #[tokio::test]
    async fn refusal_is_reported_in_band() {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            let ws = WebSocketStream::from_raw_socket(server_io, Role::Server, None).await;
            let refused = channels::refusal(
                400,
                br#"{"kind":"Status","status":"Failure","message":"container c is not running","code":400}"#,
            );
            run_with::<_, DuplexStream>(ws, Options::default(), async move { Err(refused) }).await
        });
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        assert_eq!(
            client.next().await.unwrap().unwrap(),
            Message::Binary(vec![3].into())
        );
        let Message::Binary(err) = client.next().await.unwrap().unwrap() else {
            panic!("expected the status")
        };
        let status: Value = serde_json::from_slice(&err[1..]).unwrap();
        assert_eq!(status["message"], "container c is not running");
        drop(client);
        assert_eq!(server.await.unwrap(), 400);
    }

    /// The Python client writes stdin as text frames: read as bytes, like upstream.
    #[tokio::test]
    async fn stdin_in_text_frames() {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let (kubelet_io, runtime_io) = tokio::io::duplex(1 << 16);
        let opts = Options {
            stdin: true,
            stdout: true,
            stderr: false,
            tty: false,
        };
        tokio::spawn(async move {
            let ws = WebSocketStream::from_raw_socket(server_io, Role::Server, None).await;
            run_with(ws, opts, async move { Ok(kubelet_io) }).await
        });
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        let mut runtime = FakeRuntime { io: runtime_io };
        assert_eq!(
            client.next().await.unwrap().unwrap(),
            Message::Binary(vec![1].into())
        );
        for id in [1, 3, 5] {
            assert_eq!(runtime.next().await, Seen::Control(1));
            runtime.reply(id).await;
        }
        client
            .send(Message::Text("\0echo hi\n".into()))
            .await
            .unwrap();
        // Dropped text would leave the runtime waiting: bound it, so the test fails instead of hanging.
        let seen = tokio::time::timeout(std::time::Duration::from_secs(5), runtime.next()).await;
        assert_eq!(seen.ok(), Some(Seen::Data(3, 0, b"echo hi\n".to_vec())));
    }
}
