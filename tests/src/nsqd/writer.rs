//! The writer thread of one connection and nsqd's output buffer in front of it.

use std::io::{self, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::model::frame;
use crate::transport::{ConnCtl, RawWrite, TlsShared, TlsWrite};

use super::{Layer, Out};

/// nsqd's `bufio.Writer` in front of the connection, for message frames.
pub(super) struct OutputBuffer {
    pub(super) buf: Vec<u8>,
    pub(super) size: usize,
}

impl OutputBuffer {
    /// `bufio.Writer.Write`: fill the buffer, writing it out whenever it is full; a write
    /// larger than the free space into an empty buffer goes straight through.
    pub(super) fn write(&mut self, w: &mut dyn Write, mut p: &[u8]) -> io::Result<()> {
        while p.len() > self.size - self.buf.len() {
            if self.buf.is_empty() {
                return w.write_all(p);
            }
            let n = self.size - self.buf.len();
            self.buf.extend_from_slice(&p[..n]);
            p = &p[n..];
            self.flush(w)?;
        }
        self.buf.extend_from_slice(p);
        Ok(())
    }

    pub(super) fn flush(&mut self, w: &mut dyn Write) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let r = w.write_all(&self.buf);
        self.buf.clear();
        r
    }
}

pub(super) fn writer_main(rx: &Receiver<Out>, raw: RawWrite, ctl: &ConnCtl, obuf_size: usize) {
    let stream = raw.stream.try_clone();
    let mut w: Box<dyn Write + Send> = Box::new(raw);
    let mut tls: Option<Arc<TlsShared>> = None;
    let mut hb: Option<Duration> = None;
    let mut next_hb: Option<Instant> = None;
    let mut obuf = OutputBuffer {
        buf: Vec::new(),
        size: obuf_size.max(1),
    };
    let mut flush_every: Option<Duration> = None;
    let mut next_flush: Option<Instant> = None;
    let heartbeat_frame = frame(0, b"_heartbeat_");
    'outer: loop {
        let wake = match (next_hb, next_flush) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let first = match wake {
            Some(t) => match rx.recv_timeout(t.saturating_duration_since(Instant::now())) {
                Ok(o) => o,
                Err(RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    if let (Some(t), Some(d)) = (next_flush, flush_every) {
                        if t <= now {
                            // A Go ticker drops the ticks it could not deliver.
                            next_flush = Some((t + d).max(now));
                            if obuf.flush(&mut *w).is_err() || w.flush().is_err() {
                                break 'outer;
                            }
                        }
                    }
                    match next_hb {
                        Some(t) if t <= now => {
                            let d = hb.unwrap_or(Duration::from_secs(30));
                            next_hb = Some((t + d).max(now));
                            if ctl.faults.paused.load(Ordering::SeqCst) {
                                continue;
                            }
                            Out::Frame(heartbeat_frame.clone())
                        }
                        _ => continue,
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return shut(&stream),
            },
            None => match rx.recv() {
                Ok(o) => o,
                Err(_) => return shut(&stream),
            },
        };
        let mut item = Some(first);
        let mut batch = 0;
        while let Some(o) = item.take() {
            match o {
                Out::Frame(f) => {
                    if obuf.write(&mut *w, &f).is_err() || obuf.flush(&mut *w).is_err() {
                        break 'outer;
                    }
                }
                Out::Message(f) => {
                    if obuf.write(&mut *w, &f).is_err() {
                        break 'outer;
                    }
                }
                Out::Flush => {
                    if obuf.flush(&mut *w).is_err() {
                        break 'outer;
                    }
                }
                Out::BufferSize(size) => {
                    if obuf.flush(&mut *w).is_err() {
                        break 'outer;
                    }
                    obuf.size = size.max(1);
                }
                Out::FlushTicker(d) => {
                    flush_every = d;
                    next_flush = d.map(|d| Instant::now() + d);
                }
                Out::Heartbeat(d) => {
                    hb = d;
                    next_hb = d.map(|d| Instant::now() + d);
                }
                Out::Upgrade(before, layer) => {
                    if obuf.write(&mut *w, &before).is_err()
                        || obuf.flush(&mut *w).is_err()
                        || w.flush().is_err()
                    {
                        break 'outer;
                    }
                    w = match layer {
                        Layer::Tls(shared) => {
                            tls = Some(shared.clone());
                            Box::new(TlsWrite { shared })
                        }
                        Layer::Snappy => Box::new(snap::write::FrameEncoder::new(w)),
                        Layer::Deflate(level) => Box::new(flate2::write::DeflateEncoder::new(
                            w,
                            flate2::Compression::new(level),
                        )),
                    };
                }
                Out::Close => {
                    let _ = obuf.flush(&mut *w);
                    let _ = w.flush();
                    drop(w);
                    if let Some(t) = &tls {
                        t.close();
                    }
                    if let Ok(s) = &stream {
                        let _ = s.shutdown(Shutdown::Write);
                    }
                    return;
                }
            }
            batch += 1;
            if batch < 256 {
                item = rx.try_recv().ok();
            }
        }
        if w.flush().is_err() {
            break;
        }
    }
    // A write failed (the client does not read, so the write deadline passed; or the socket
    // broke). Like nsqd's, whose buffered writer keeps its error: nothing is written any
    // more (no message, no heartbeat), and the reader closes the connection when it next
    // has a reply to send, or when its read deadline passes.
    ctl.write_failed.store(true, Ordering::SeqCst);
}

/// The reader is gone: shuts the socket down.
fn shut(stream: &io::Result<std::net::TcpStream>) {
    if let Ok(s) = stream {
        let _ = s.shutdown(Shutdown::Both);
    }
}
