//! [`WorkerSink`]: runs another [`Sink`]'s writes on a thread of its own, so that
//! decompressing and hashing (the caller's thread) overlap with `write(2)` (the worker).
//!
//! The caller's thread hands over each chunk right after hashing it, while it is still in that
//! core's cache; the copy into a pooled buffer is cheap next to the write the worker then does.
//! Memory stays bounded: at most [`QUEUE`] chunks of at most [`CHUNK`] bytes are in flight, and
//! their buffers are recycled.
//!
//! Errors happen on the worker after the caller moved on: the first one is kept (prefixed with
//! the path it concerns), the worker stops, and the caller's next call — at the latest
//! [`Sink::finish`] — returns it. Dropping the sink waits for the worker, so nothing is still
//! writing into a directory the caller is about to remove.

use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use crate::verify::Sink;

/// Chunks queued between the caller and the worker.
pub const QUEUE: usize = 8;
/// Largest chunk sent at once (larger writes are split).
pub const CHUNK: usize = 256 * 1024;

enum Command {
    Dir(String),
    Open(String, u32),
    Data(Vec<u8>),
    Close,
    Finish,
}

/// A [`Sink`] whose inner sink runs on a worker thread.
pub struct WorkerSink {
    commands: Option<SyncSender<Command>>,
    spare: Receiver<Vec<u8>>,
    worker: Option<JoinHandle<io::Result<()>>>,
    /// The worker's error once it was collected.
    failed: Option<io::Error>,
}

impl WorkerSink {
    /// Starts the worker, which owns `inner`.
    ///
    /// # Errors
    ///
    /// The thread cannot be spawned.
    pub fn spawn<S: Sink + Send + 'static>(inner: S) -> io::Result<Self> {
        let (commands, queue) = mpsc::sync_channel(QUEUE);
        let (recycle, spare) = mpsc::sync_channel(QUEUE + 2);
        let worker = std::thread::Builder::new()
            .name("bundle-writer".into())
            .spawn(move || work(inner, &queue, &recycle))?;
        Ok(Self {
            commands: Some(commands),
            spare,
            worker: Some(worker),
            failed: None,
        })
    }

    fn send(&mut self, command: Command) -> io::Result<()> {
        let sent = match &self.commands {
            Some(tx) => tx.send(command).is_ok(),
            None => false,
        };
        if sent {
            Ok(())
        } else {
            Err(self.collect())
        }
    }

    /// Stops the worker and returns its error (or a generic one if it ended without one).
    fn collect(&mut self) -> io::Error {
        self.commands = None;
        if let Some(worker) = self.worker.take() {
            self.failed = Some(match worker.join() {
                Ok(Err(e)) => e,
                Ok(Ok(())) => io::Error::other("the bundle writer stopped early"),
                Err(_) => io::Error::other("the bundle writer panicked"),
            });
        }
        match &self.failed {
            Some(e) => io::Error::new(e.kind(), e.to_string()),
            None => io::Error::other("the bundle writer stopped early"),
        }
    }

    fn buffer(&self) -> Vec<u8> {
        self.spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK))
    }
}

impl Drop for WorkerSink {
    fn drop(&mut self) {
        self.commands = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

fn work<S: Sink>(
    mut inner: S,
    queue: &Receiver<Command>,
    recycle: &SyncSender<Vec<u8>>,
) -> io::Result<()> {
    let with_path = |path: &str, e: io::Error| io::Error::new(e.kind(), format!("{path}: {e}"));
    let mut pending: Option<Command> = None;
    loop {
        let command = match pending.take() {
            Some(c) => c,
            None => match queue.recv() {
                Ok(c) => c,
                Err(_) => return Ok(()),
            },
        };
        match command {
            Command::Dir(path) => inner.dir(&path).map_err(|e| with_path(&path, e))?,
            Command::Open(path, mode) => {
                let mut w = inner.file(&path, mode).map_err(|e| with_path(&path, e))?;
                // The file's chunks follow until its Close (or, if the caller dropped the
                // writer without flushing, until the next entry).
                loop {
                    match queue.recv() {
                        Ok(Command::Data(buf)) => {
                            w.write_all(&buf).map_err(|e| with_path(&path, e))?;
                            let _ = recycle.try_send(buf);
                        }
                        Ok(Command::Close) => {
                            w.flush().map_err(|e| with_path(&path, e))?;
                            break;
                        }
                        Ok(other) => {
                            pending = Some(other);
                            break;
                        }
                        Err(_) => return Ok(()),
                    }
                }
            }
            Command::Finish => return inner.finish(),
            Command::Data(_) | Command::Close => {}
        }
    }
}

impl Sink for WorkerSink {
    fn dir(&mut self, path: &str) -> io::Result<()> {
        self.send(Command::Dir(path.to_owned()))
    }

    fn file(&mut self, path: &str, mode: u32) -> io::Result<Box<dyn Write + '_>> {
        self.send(Command::Open(path.to_owned(), mode))?;
        Ok(Box::new(ChunkWriter { sink: self }))
    }

    fn finish(&mut self) -> io::Result<()> {
        self.send(Command::Finish)?;
        self.commands = None;
        match self.worker.take() {
            Some(worker) => match worker.join() {
                Ok(result) => result,
                Err(_) => Err(io::Error::other("the bundle writer panicked")),
            },
            None => Err(self.collect()),
        }
    }
}

/// The writer of one file: sends its bytes to the worker in chunks.
struct ChunkWriter<'a> {
    sink: &'a mut WorkerSink,
}

impl Write for ChunkWriter<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK);
        let mut buf = self.sink.buffer();
        buf.clear();
        buf.extend_from_slice(&data[..n]);
        self.sink.send(Command::Data(buf))?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sink.send(Command::Close)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dirsink::DirSink;

    /// Records what reached the inner sink, in order, and whether it was finished.
    #[derive(Default)]
    struct Recorder {
        log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    }

    struct RecordingWriter(std::sync::Arc<std::sync::Mutex<Vec<String>>>, String, usize);

    impl Write for RecordingWriter {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            self.2 += data.len();
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            if let Ok(mut log) = self.0.lock() {
                log.push(format!("close {} {}", self.1, self.2));
            }
            Ok(())
        }
    }

    impl Sink for Recorder {
        fn dir(&mut self, path: &str) -> io::Result<()> {
            self.log.lock().expect("lock").push(format!("dir {path}"));
            Ok(())
        }
        fn file(&mut self, path: &str, mode: u32) -> io::Result<Box<dyn Write + '_>> {
            self.log
                .lock()
                .expect("lock")
                .push(format!("file {path} {mode:o}"));
            Ok(Box::new(RecordingWriter(self.log.clone(), path.into(), 0)))
        }
        fn finish(&mut self) -> io::Result<()> {
            self.log.lock().expect("lock").push("finish".into());
            Ok(())
        }
    }

    #[test]
    fn passes_everything_through_in_order_and_finishes_the_inner_sink() {
        let recorder = Recorder::default();
        let log = recorder.log.clone();
        let mut sink = WorkerSink::spawn(recorder).expect("spawn");
        sink.dir("a").expect("dir");
        let big = vec![7u8; 3 * CHUNK + 11];
        {
            let mut w = sink.file("a/big", 0o644).expect("file");
            w.write_all(&big).expect("write");
            w.flush().expect("flush");
        }
        {
            let mut w = sink.file("a/small", 0o755).expect("file");
            w.write_all(b"hi").expect("write");
            w.flush().expect("flush");
        }
        sink.finish().expect("finish");
        assert_eq!(
            *log.lock().expect("lock"),
            vec![
                "dir a".to_owned(),
                "file a/big 644".to_owned(),
                format!("close a/big {}", big.len()),
                "file a/small 755".to_owned(),
                "close a/small 2".to_owned(),
                "finish".to_owned(),
            ]
        );
    }

    #[test]
    fn writes_the_same_tree_as_the_inner_sink() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let inner = DirSink::new(tmp.path().join("root")).expect("sink");
        let mut sink = WorkerSink::spawn(inner).expect("spawn");
        let data: Vec<u8> = (0..(2 * CHUNK + 100)).map(|i| (i % 251) as u8).collect();
        sink.dir("d").expect("dir");
        {
            let mut w = sink.file("d/f", 0o600).expect("file");
            w.write_all(&data).expect("write");
            w.flush().expect("flush");
        }
        sink.finish().expect("finish");
        assert_eq!(
            fs_err::read(tmp.path().join("root/d/f")).expect("read"),
            data
        );
    }

    #[test]
    fn an_error_on_the_worker_reaches_the_caller_with_its_path() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        let inner = DirSink::new(&root).expect("sink");
        // `x` is a regular file, so creating `x/y` fails on the worker.
        fs_err::write(root.join("x"), b"file").expect("write");
        let mut sink = WorkerSink::spawn(inner).expect("spawn");
        let mut first_error = None;
        for i in 0..100 {
            let r = sink
                .file("x/y", 0o644)
                .and_then(|mut w| w.write_all(&[i; 10]).and_then(|()| w.flush()));
            if let Err(e) = r {
                first_error = Some(e);
                break;
            }
        }
        let err = match first_error {
            Some(e) => e,
            None => sink
                .finish()
                .expect_err("finish must report the worker's error"),
        };
        assert!(err.to_string().contains("x/y"), "{err}");
        // Later calls keep failing instead of writing.
        assert!(sink.dir("z").is_err());
        assert!(!root.join("z").exists());
    }
}
