//! The file side of the `nsq_to_file` tools, without a runtime: one topic's output file, as
//! the official tool's `FileLogger` (nsq v1.3.0, `apps/nsq_to_file/file_logger.go`) keeps it.
//!
//! - Every message body is written as one line (body + `\n`), in the order given.
//! - The file's name is `--filename-format` with its placeholders ([`filename_template`]);
//!   `<DATETIME>` is `--datetime-format` of the time the file is opened ([`strftime`]).
//! - A file is rotated (closed, and the next one opened) before a message when its name's
//!   `<DATETIME>` changed, when it is older than `--rotate-interval`, or when it has more than
//!   `--rotate-size` bytes (uncompressed bytes written, with gzip). `<REV>` is `-000000`,
//!   `-000001`, ...: it restarts at 0 for a new name and is bumped past any file that exists
//!   (in the work dir or the output dir), or that is already over `--rotate-size`.
//! - Files are written in `--work-dir` and moved to `--output-dir` when closed (a hard link
//!   then an unlink, so an existing file is never overwritten: its `<REV>` is bumped).
//! - With gzip, each [`FileSink::sync`] ends the gzip member and starts another (a file is a
//!   concatenation of members, as `gzip -d` reads it), so what was synced is a whole member.
//! - [`FileSink::sync`] makes every line written so far durable (fsync). A caller answers a
//!   message only after the sync that covers its line: then no message is lost when the
//!   process dies, at worst written twice.
//!
//! Unlike the official tool, lines are gathered in a buffer and written once per batch (one
//! `write` for a batch, where the Go tool makes two per message), and a plain file reopened
//! for appending whose last line was cut (a process killed in the middle of a `write`) gets
//! its `\n` first, so the next line is whole.
//!
//! Time comes in as an argument (`now`), so the rotation is tested without waiting.

mod name;
#[cfg(test)]
mod tests;

pub use name::{Civil, filename_template, strftime};

use flate2::Compression;
use flate2::write::GzEncoder;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Bytes gathered before they are written out within a batch.
const WRITE_CHUNK: usize = 1 << 20;

/// The official tool's file flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkOptions {
    /// `--output-dir` (default `/tmp`).
    pub output_dir: PathBuf,
    /// `--work-dir`: in-progress files (default: the output dir).
    pub work_dir: PathBuf,
    /// `--filename-format` (default `<TOPIC>.<HOST><REV>.<DATETIME>.log`).
    pub filename_format: String,
    /// `--datetime-format` (default `%Y-%m-%d_%H`).
    pub datetime_format: String,
    /// `--host-identifier` (default empty: the short host name).
    pub host_identifier: String,
    /// `--gzip` with `--gzip-level` (1-9), or `None`.
    pub gzip_level: Option<u32>,
    /// `--rotate-size` in bytes, 0 for none.
    pub rotate_size: u64,
    /// `--rotate-interval`, zero for none.
    pub rotate_interval: Duration,
    /// `--skip-empty-files`: a rotation by the clock ([`FileSink::tick`]) closes the file
    /// without opening an empty one.
    pub skip_empty_files: bool,
}

impl Default for SinkOptions {
    fn default() -> Self {
        SinkOptions {
            output_dir: PathBuf::from("/tmp"),
            work_dir: PathBuf::from("/tmp"),
            filename_format: "<TOPIC>.<HOST><REV>.<DATETIME>.log".to_owned(),
            datetime_format: "%Y-%m-%d_%H".to_owned(),
            host_identifier: String::new(),
            gzip_level: None,
            rotate_size: 0,
            rotate_interval: Duration::ZERO,
            skip_empty_files: false,
        }
    }
}

impl SinkOptions {
    /// True when file names keep `<REV>` (gzip, rotation or a work dir).
    pub fn needs_rev(&self) -> bool {
        self.gzip_level.is_some()
            || self.rotate_size > 0
            || !self.rotate_interval.is_zero()
            || self.work_dir != self.output_dir
    }
}

/// What a sink has done, for the progress lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkCounts {
    /// Lines written.
    pub lines: u64,
    /// Bytes of lines written (uncompressed).
    pub bytes: u64,
    /// fsyncs of files.
    pub syncs: u64,
    /// Files opened.
    pub files: u64,
}

enum Writer {
    Plain(File),
    Gzip(GzEncoder<File>),
}

struct Output {
    path: PathBuf,
    writer: Writer,
}

/// One topic's output file (see the module docs).
pub struct FileSink {
    opts: SinkOptions,
    template: String,
    out: Option<Output>,
    /// The open file's name (`<DATETIME>` replaced, `<REV>` not).
    filename: String,
    rev: u32,
    opened: SystemTime,
    size: u64,
    buf: Vec<u8>,
    dirty: bool,
    counts: SinkCounts,
    log: Box<dyn FnMut(&str) + Send>,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("template", &self.template)
            .field("path", &self.out.as_ref().map(|o| &o.path))
            .field("size", &self.size)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl FileSink {
    /// A sink for one topic's file names (`template`, from [`filename_template`]); `log`
    /// receives the official tool's lines (opening, rotating, moving, syncing).
    pub fn new(opts: SinkOptions, template: String, log: Box<dyn FnMut(&str) + Send>) -> Self {
        FileSink {
            opts,
            template,
            out: None,
            filename: String::new(),
            rev: 0,
            opened: SystemTime::UNIX_EPOCH,
            size: 0,
            buf: Vec::new(),
            dirty: false,
            counts: SinkCounts::default(),
            log,
        }
    }

    /// What was done so far.
    pub fn counts(&self) -> SinkCounts {
        self.counts
    }

    /// The path of the open file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.out.as_ref().map(|o| o.path.as_path())
    }

    /// Writes each body as a line, rotating first where needed; durable only after
    /// [`FileSink::sync`].
    pub fn write_lines<'a>(
        &mut self,
        now: SystemTime,
        bodies: impl IntoIterator<Item = &'a [u8]>,
    ) -> io::Result<()> {
        let name = self.current_filename(now);
        for body in bodies {
            if self.needs_rotation(now, &name) {
                self.update_file(now, &name)?;
            }
            self.buf.extend_from_slice(body);
            self.buf.push(b'\n');
            let n = body.len() as u64 + 1;
            self.size += n;
            self.counts.lines += 1;
            self.counts.bytes += n;
            if self.buf.len() >= WRITE_CHUNK {
                self.flush_buf()?;
            }
        }
        self.flush_buf()
    }

    /// Makes every line written so far durable: the gzip member ended (and a new one begun),
    /// then fsync. Nothing to do when nothing was written since the last sync.
    pub fn sync(&mut self) -> io::Result<()> {
        self.flush_buf()?;
        if !self.dirty {
            return Ok(());
        }
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        if let Writer::Gzip(gz) = &mut out.writer {
            let level = gz_level(self.opts.gzip_level);
            let member = std::mem::replace(gz, GzEncoder::new(out_file_clone(gz)?, level));
            let file = member.finish()?;
            file.sync_all()?;
        } else if let Writer::Plain(file) = &out.writer {
            file.sync_all()?;
        }
        self.dirty = false;
        self.counts.syncs += 1;
        Ok(())
    }

    /// The sync interval's tick of the official tool: when the file is due for rotation (or
    /// none is open), opens the next one, or with `skip_empty_files` closes it; then syncs.
    pub fn tick(&mut self, now: SystemTime) -> io::Result<()> {
        let name = self.current_filename(now);
        if self.needs_rotation(now, &name) {
            if self.opts.skip_empty_files {
                self.close()?;
            } else {
                self.update_file(now, &name)?;
            }
        }
        self.sync()
    }

    /// Syncs and closes the file, moving it from the work dir to the output dir (bumping
    /// `<REV>` past a file that exists there). Nothing to do when none is open.
    pub fn close(&mut self) -> io::Result<()> {
        self.flush_buf()?;
        let Some(out) = self.out.take() else {
            return Ok(());
        };
        let file = match out.writer {
            Writer::Plain(file) => file,
            Writer::Gzip(gz) => gz.finish()?,
        };
        file.sync_all()?;
        drop(file);
        if self.dirty {
            self.counts.syncs += 1;
        }
        self.dirty = false;
        if self.opts.work_dir == self.opts.output_dir {
            return Ok(());
        }
        let src = out.path;
        let dst = self.output_path(&src);
        (self.log)(&format!(
            "moving finished file {} to {}",
            src.display(),
            dst.display()
        ));
        match exclusive_rename(&src, &dst) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let name = Path::new(&self.filename)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = dst.parent().map(Path::to_path_buf).unwrap_or_default();
        for rev in self.rev + 1.. {
            let candidate = dir.join(name.replace("<REV>", &format!("-{rev:06}")));
            (self.log)(&format!(
                "destination file already exists: {}",
                candidate.display()
            ));
            match exclusive_rename(&src, &candidate) {
                Ok(()) => {
                    (self.log)(&format!(
                        "renamed finished file {} to {} to avoid overwrite",
                        src.display(),
                        candidate.display()
                    ));
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn current_filename(&self, now: SystemTime) -> String {
        self.template
            .replace("<DATETIME>", &strftime(&self.opts.datetime_format, now))
    }

    fn needs_rotation(&mut self, now: SystemTime, name: &str) -> bool {
        let Some(out) = &self.out else {
            return true;
        };
        if name != self.filename {
            (self.log)(&format!("new filename {name}, rotating..."));
            return true;
        }
        if !self.opts.rotate_interval.is_zero() {
            let age = now.duration_since(self.opened).unwrap_or_default();
            if age > self.opts.rotate_interval {
                (self.log)(&format!(
                    "{} since last open, rotating...",
                    crate::go_duration(age)
                ));
                return true;
            }
        }
        if self.opts.rotate_size > 0 && self.size > self.opts.rotate_size {
            (self.log)(&format!(
                "{} currently {} bytes (> {}), rotating...",
                out.path.display(),
                self.size,
                self.opts.rotate_size
            ));
            return true;
        }
        false
    }

    fn update_file(&mut self, now: SystemTime, name: &str) -> io::Result<()> {
        self.close()?;
        if name == self.filename {
            self.rev += 1;
        } else {
            self.rev = 0;
        }
        name.clone_into(&mut self.filename);
        self.opened = now;
        let full = self.opts.work_dir.join(name).to_string_lossy().into_owned();
        make_parent(Path::new(&full))?;
        let exclusive = self.opts.gzip_level.is_some() || !self.opts.rotate_interval.is_zero();
        loop {
            let path = PathBuf::from(full.replace("<REV>", &format!("-{:06}", self.rev)));
            if self.opts.work_dir != self.opts.output_dir {
                let dst = self.output_path(&path);
                make_parent(&dst)?;
                if fs::symlink_metadata(&dst).is_ok() {
                    (self.log)(&format!("output file already exists: {}", dst.display()));
                    self.rev += 1;
                    continue;
                }
            }
            let mut open = OpenOptions::new();
            open.write(true);
            if exclusive {
                open.create_new(true);
            } else {
                open.create(true).append(true);
            }
            let file = match open.open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    (self.log)(&format!("working file already exists: {}", path.display()));
                    self.rev += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            (self.log)(&format!("opening {}", path.display()));
            self.size = file.metadata()?.len();
            if self.opts.rotate_size > 0 && self.size > self.opts.rotate_size {
                (self.log)(&format!(
                    "{} currently {} bytes (> {}), rotating...",
                    path.display(),
                    self.size,
                    self.opts.rotate_size
                ));
                self.rev += 1;
                continue;
            }
            let writer = if let Some(level) = self.opts.gzip_level {
                Writer::Gzip(GzEncoder::new(file, Compression::new(level)))
            } else {
                if self.size > 0 && !ends_with_newline(&path)? {
                    (self.log)(&format!("ending the cut last line of {}", path.display()));
                    self.buf.push(b'\n');
                    self.size += 1;
                }
                Writer::Plain(file)
            };
            self.out = Some(Output { path, writer });
            self.counts.files += 1;
            return Ok(());
        }
    }

    /// Where a file of the work dir goes in the output dir.
    fn output_path(&self, path: &Path) -> PathBuf {
        let rel = path.strip_prefix(&self.opts.work_dir).unwrap_or(path);
        self.opts.output_dir.join(rel)
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let Some(out) = self.out.as_mut() else {
            return Err(io::Error::other("no file open for writing"));
        };
        match &mut out.writer {
            Writer::Plain(file) => file.write_all(&self.buf)?,
            Writer::Gzip(gz) => gz.write_all(&self.buf)?,
        }
        self.buf.clear();
        self.dirty = true;
        Ok(())
    }
}

/// The host name (Go's `os.Hostname`), for `<HOST>`.
pub fn hostname() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

fn gz_level(level: Option<u32>) -> Compression {
    Compression::new(level.unwrap_or(6))
}

/// Another handle on the gzip writer's file, for the member that follows it.
fn out_file_clone(gz: &GzEncoder<File>) -> io::Result<File> {
    gz.get_ref().try_clone()
}

fn ends_with_newline(path: &Path) -> io::Result<bool> {
    let mut f = File::open(path)?;
    f.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    f.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

fn make_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => fs::create_dir_all(dir),
        _ => Ok(()),
    }
}

/// Moves `src` to `dst` unless `dst` exists (a hard link, then the unlink of `src`).
fn exclusive_rename(src: &Path, dst: &Path) -> io::Result<()> {
    fs::hard_link(src, dst)?;
    fs::remove_file(src)
}
