//! The server side of a connection's byte stream: the raw socket halves (with read deadlines
//! and fault injection), the TLS layer and the compression layers.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Read throttling applied to every connection of a broker (the "slow reads" fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    /// At most this many bytes per read from the socket (at least 1 is used).
    pub bytes_per_read: usize,
    /// Sleep this long before each read.
    pub pause: Duration,
}

/// Broker-wide fault switches every connection looks at.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    pub(crate) paused: AtomicBool,
    pub(crate) throttle: Mutex<Option<Throttle>>,
}

/// Per-connection control shared by the reader, the writer and the broker.
#[derive(Debug)]
pub(crate) struct ConnCtl {
    pub(crate) deadline: Mutex<Option<Instant>>,
    /// How long one write may block (nsqd's write deadline: the heartbeat interval; none
    /// with heartbeats disabled).
    write_timeout: Mutex<Option<Duration>>,
    pub(crate) killed: AtomicBool,
    /// A write failed: the writer has stopped for good (see `writer_main`).
    pub(crate) write_failed: AtomicBool,
    pub(crate) faults: Arc<Faults>,
}

impl ConnCtl {
    pub(crate) fn new(faults: Arc<Faults>) -> Self {
        Self {
            deadline: Mutex::new(None),
            write_timeout: Mutex::new(None),
            killed: AtomicBool::new(false),
            write_failed: AtomicBool::new(false),
            faults,
        }
    }

    pub(crate) fn set_deadline(&self, deadline: Option<Instant>) {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner) = deadline;
    }

    /// Sets how long one write may block before the connection is given up (nsqd sets a
    /// write deadline of the client's heartbeat interval before every write).
    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) {
        *self
            .write_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = timeout;
    }

    fn write_timeout(&self) -> Option<Duration> {
        *self
            .write_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// Blocks while the broker is paused (half-open fault); false if the connection was killed.
    pub(crate) fn wait_unpaused(&self) -> bool {
        while self.faults.paused.load(Ordering::SeqCst) {
            if self.killed() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        !self.killed()
    }

    fn throttle(&self) -> Option<Throttle> {
        *self
            .faults
            .throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Slice length of a blocking read, so pause/kill/deadline are noticed promptly.
const READ_SLICE: Duration = Duration::from_millis(20);

/// The socket's read half: honours the read deadline, pause, throttle and kill.
pub(crate) struct RawRead {
    pub(crate) stream: TcpStream,
    pub(crate) ctl: Arc<ConnCtl>,
}

impl Read for RawRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.ctl.wait_unpaused() {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "connection killed",
                ));
            }
            let mut limit = buf.len();
            if let Some(t) = self.ctl.throttle() {
                limit = limit.min(t.bytes_per_read.max(1));
                std::thread::sleep(t.pause);
            }
            let mut slice = READ_SLICE;
            if let Some(deadline) = self.ctl.deadline() {
                let now = Instant::now();
                if deadline <= now {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "read deadline passed",
                    ));
                }
                slice = slice.min(deadline - now);
            }
            self.stream
                .set_read_timeout(Some(slice.max(Duration::from_millis(1))))?;
            match self.stream.read(&mut buf[..limit]) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Ok(n) => {
                    // Bytes that arrived while a pause began are held until it ends.
                    if !self.ctl.wait_unpaused() {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "connection killed",
                        ));
                    }
                    return Ok(n);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The socket's write half: blocks while paused, fails once killed, and fails a write that
/// stays blocked for the write timeout (a client that does not read), as nsqd's write
/// deadline does.
pub(crate) struct RawWrite {
    pub(crate) stream: TcpStream,
    pub(crate) ctl: Arc<ConnCtl>,
}

impl Write for RawWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.ctl.wait_unpaused() {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "connection killed",
            ));
        }
        let timeout = self.ctl.write_timeout().filter(|t| !t.is_zero());
        self.stream.set_write_timeout(timeout)?;
        match self.stream.write(buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "write deadline passed: the client does not read",
                ))
            }
            other => other,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// rustls server state shared by the two halves; socket writes happen under the same lock so
/// TLS records leave in the order they were produced.
pub(crate) struct TlsShared {
    inner: Mutex<(rustls::ServerConnection, RawWrite)>,
}

impl TlsShared {
    pub(crate) fn new(conn: rustls::ServerConnection, raw: RawWrite) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new((conn, raw)),
        })
    }

    fn flush_tls(conn: &mut rustls::ServerConnection, raw: &mut RawWrite) -> io::Result<()> {
        while conn.wants_write() {
            conn.write_tls(raw)?;
        }
        Ok(())
    }

    /// The negotiated cipher suite and protocol version (IANA numbers), once the handshake
    /// got that far.
    pub(crate) fn negotiated(&self) -> (Option<u16>, Option<u16>) {
        let guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let conn = &guard.0;
        (
            conn.negotiated_cipher_suite().map(|s| u16::from(s.suite())),
            conn.protocol_version().map(u16::from),
        )
    }

    /// Sends close_notify (best effort).
    pub(crate) fn close(&self) {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (conn, raw) = &mut *guard;
        conn.send_close_notify();
        let _ = Self::flush_tls(conn, raw);
    }
}

/// Plaintext reader over TLS.
pub(crate) struct TlsRead {
    pub(crate) shared: Arc<TlsShared>,
    pub(crate) raw: RawRead,
    pending: Vec<u8>,
}

impl TlsRead {
    pub(crate) fn new(shared: Arc<TlsShared>, raw: RawRead) -> Self {
        Self {
            shared,
            raw,
            pending: Vec::new(),
        }
    }
}

impl Read for TlsRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut guard = self
                    .shared
                    .inner
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let (conn, raw) = &mut *guard;
                match conn.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if !self.pending.is_empty() {
                    let mut slice = &self.pending[..];
                    let before = slice.len();
                    let fed = conn.read_tls(&mut slice);
                    let used = before - slice.len();
                    self.pending.drain(..used);
                    let processed = conn.process_new_packets();
                    let flushed = TlsShared::flush_tls(conn, raw);
                    if let Err(e) = processed {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                    flushed?;
                    if fed.is_ok() && used > 0 {
                        continue;
                    }
                    if !conn.wants_read() {
                        // Plaintext buffer full: loop to hand it out first.
                        continue;
                    }
                }
            }
            let mut tmp = [0u8; 4096];
            let n = self.raw.read(&mut tmp)?;
            if n == 0 {
                return Ok(0);
            }
            self.pending.extend_from_slice(&tmp[..n]);
        }
    }
}

/// Plaintext writer over TLS.
pub(crate) struct TlsWrite {
    pub(crate) shared: Arc<TlsShared>,
}

impl Write for TlsWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut guard = self
            .shared
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (conn, raw) = &mut *guard;
        let n = conn.writer().write(buf)?;
        TlsShared::flush_tls(conn, raw)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "TLS send buffer full",
            ));
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut guard = self
            .shared
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (conn, raw) = &mut *guard;
        conn.writer().flush()?;
        TlsShared::flush_tls(conn, raw)?;
        raw.flush()
    }
}

/// Buffered reader of commands over a replaceable byte source (the upgrades swap it).
pub(crate) struct CmdReader {
    inner: Box<dyn Read + Send>,
    buf: Vec<u8>,
    start: usize,
}

/// nsqd's bufio reader size: a command line longer than this closes the connection.
pub(crate) const MAX_LINE: usize = 16 * 1024;

pub(crate) enum LineError {
    Io(io::Error),
    TooLong,
}

impl CmdReader {
    pub(crate) fn new(inner: Box<dyn Read + Send>) -> Self {
        Self {
            inner,
            buf: Vec::with_capacity(4096),
            start: 0,
        }
    }

    /// Replaces the byte source. Bytes already buffered are discarded, like nsqd does.
    pub(crate) fn upgrade(
        &mut self,
        f: impl FnOnce(Box<dyn Read + Send>) -> Box<dyn Read + Send>,
    ) -> usize {
        let old = std::mem::replace(&mut self.inner, Box::new(io::empty()));
        self.inner = f(old);
        let discarded = self.buf.len() - self.start;
        self.buf.clear();
        self.start = 0;
        discarded
    }

    fn fill(&mut self) -> io::Result<usize> {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        let mut tmp = [0u8; 8192];
        let n = self.inner.read(&mut tmp)?;
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n)
    }

    /// Reads one line without its `\n`; `Ok(None)` on a clean EOF before any byte.
    pub(crate) fn read_line(&mut self) -> Result<Option<Vec<u8>>, LineError> {
        let mut scanned = 0;
        loop {
            let avail = &self.buf[self.start..];
            if let Some(pos) = avail[scanned..].iter().position(|&b| b == b'\n') {
                let end = scanned + pos;
                if end + 1 > MAX_LINE {
                    return Err(LineError::TooLong);
                }
                let line = avail[..end].to_vec();
                self.start += end + 1;
                return Ok(Some(line));
            }
            scanned = avail.len();
            if scanned >= MAX_LINE {
                return Err(LineError::TooLong);
            }
            match self.fill() {
                Ok(0) => {
                    if self.start == self.buf.len() {
                        return Ok(None);
                    }
                    return Err(LineError::Io(io::ErrorKind::UnexpectedEof.into()));
                }
                Ok(_) => {}
                Err(e) => return Err(LineError::Io(e)),
            }
        }
    }

    /// Reads exactly `n` bytes.
    pub(crate) fn read_exact_vec(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(n.min(1 << 20));
        while out.len() < n {
            if self.start == self.buf.len() && self.fill()? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let take = (n - out.len()).min(self.buf.len() - self.start);
            out.extend_from_slice(&self.buf[self.start..self.start + take]);
            self.start += take;
        }
        Ok(out)
    }

    /// Reads a big-endian i32 (nsqd's `readLen`).
    pub(crate) fn read_len(&mut self) -> io::Result<i32> {
        let b = self.read_exact_vec(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// A raw-DEFLATE reader that hands out pending output before reading more input.
///
/// flate2's `read::DeflateDecoder` asks its source for more bytes before draining output it
/// already holds, which blocks on a socket when the peer has sent everything (a sync-flushed
/// batch) and is waiting for our answer.
pub(crate) struct InflateReader<R> {
    inner: R,
    state: flate2::Decompress,
    input: Vec<u8>,
    pos: usize,
}

impl<R: Read> InflateReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner,
            state: flate2::Decompress::new(false),
            input: Vec::new(),
            pos: 0,
        }
    }
}

impl<R: Read> Read for InflateReader<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            let (in_before, out_before) = (self.state.total_in(), self.state.total_out());
            let status = self
                .state
                .decompress(&self.input[self.pos..], out, flate2::FlushDecompress::None)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            self.pos += (self.state.total_in() - in_before) as usize;
            let produced = (self.state.total_out() - out_before) as usize;
            if produced > 0 {
                return Ok(produced);
            }
            if status == flate2::Status::StreamEnd {
                return Ok(0);
            }
            if self.pos == self.input.len() {
                self.input.clear();
                self.pos = 0;
            }
            let mut tmp = [0u8; 8192];
            let n = self.inner.read(&mut tmp)?;
            if n == 0 {
                return Ok(0);
            }
            self.input.extend_from_slice(&tmp[..n]);
        }
    }
}
