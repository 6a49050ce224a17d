//! The second half of [`super::verify`]: hands every entry to the sink on its own thread, while
//! the caller's thread decompresses, parses and hashes the stream (hashing there, right after
//! decompression, reads the data while it is still in the CPU cache).
//!
//! Entries arrive in stream order as [`Job`]s through a bounded channel; content comes in
//! chunks of at most [`CHUNK`] bytes whose buffers go back to the parser through a second
//! channel, so memory stays flat. The worker stops at the first sink error; the parser then
//! sees a closed channel and asks [`Worker::stop`] for it.

use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::{Scope, ScopedJoinHandle};

use super::{Sink, VerifyError};

/// Size of content buffers (the metadata entries come in one buffer of their own size).
pub(super) const CHUNK: usize = 256 << 10;
/// Jobs queued for the worker.
const DEPTH: usize = 8;

/// One step for the worker, in stream order.
pub(super) enum Job {
    /// A directory.
    Dir(String),
    /// A regular file starts.
    File { path: String, mode: u32 },
    /// Content of the current file: the first `len` bytes of the buffer.
    Data(Vec<u8>, usize),
    /// The current file is complete.
    EndFile,
    /// The whole stream verified: call [`Sink::finish`].
    Finish,
}

/// The parser's end of the worker.
pub(super) struct Worker<'scope> {
    jobs: SyncSender<Job>,
    buffers: Receiver<Vec<u8>>,
    handle: ScopedJoinHandle<'scope, Result<(), VerifyError>>,
}

impl<'scope> Worker<'scope> {
    /// Starts the worker on `scope`, writing into `sink`.
    pub(super) fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        sink: &'scope mut (dyn Sink + Send),
    ) -> Self {
        let (jobs, job_rx) = mpsc::sync_channel(DEPTH);
        let (recycle, buffers) = mpsc::sync_channel(DEPTH + 2);
        let handle = scope.spawn(move || run(sink, &job_rx, &recycle));
        Self {
            jobs,
            buffers,
            handle,
        }
    }

    /// A content buffer of [`CHUNK`] bytes, recycled when possible.
    pub(super) fn buffer(&self) -> Vec<u8> {
        self.buffers.try_recv().unwrap_or_else(|_| vec![0; CHUNK])
    }

    /// Queues a job; `Err(())` means the worker stopped (call [`Worker::stop`] for its error).
    pub(super) fn send(&self, job: Job) -> Result<(), Stopped> {
        self.jobs.send(job).map_err(|_| Stopped)
    }

    /// Waits for the worker to drain its queue and returns its verdict. Without a
    /// [`Job::Finish`] before, this aborts: the worker stops at the end of what it was sent.
    pub(super) fn stop(self) -> Result<(), VerifyError> {
        drop(self.jobs);
        self.handle.join().unwrap_or_else(|_| {
            Err(VerifyError::Finish(io::Error::other(
                "the verify worker thread panicked",
            )))
        })
    }
}

/// The worker has stopped; [`Worker::stop`] tells why.
#[derive(Debug)]
pub(super) struct Stopped;

fn run(
    sink: &mut (dyn Sink + Send),
    jobs: &Receiver<Job>,
    recycle: &SyncSender<Vec<u8>>,
) -> Result<(), VerifyError> {
    // A closed channel without `Finish`: the parser gave up; its error is the one to report.
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Dir(path) => {
                if let Err(source) = sink.dir(&path) {
                    return Err(VerifyError::Sink { path, source });
                }
            }
            Job::File { path, mode } => {
                let out = match sink.file(&path, mode) {
                    Ok(out) => out,
                    Err(source) => return Err(VerifyError::Sink { path, source }),
                };
                let file = File { path, out };
                if !file.write(jobs, recycle)? {
                    return Ok(());
                }
            }
            Job::Data(..) => return Err(out_of_order()),
            Job::EndFile => return Err(out_of_order()),
            Job::Finish => return sink.finish().map_err(VerifyError::Finish),
        }
    }
    Ok(())
}

/// The parser broke the File → Data… → EndFile protocol (a bug, not a bad bundle).
fn out_of_order() -> VerifyError {
    VerifyError::Finish(io::Error::other("verify worker: jobs out of order"))
}

/// The file being written.
struct File<'a> {
    path: String,
    out: Box<dyn Write + 'a>,
}

impl File<'_> {
    /// Writes content up to [`Job::EndFile`]; `Ok(false)` if the channel closed first (the
    /// parser gave up).
    fn write(
        mut self,
        jobs: &Receiver<Job>,
        recycle: &SyncSender<Vec<u8>>,
    ) -> Result<bool, VerifyError> {
        loop {
            match jobs.recv() {
                Ok(Job::Data(buf, len)) => {
                    let written = self.out.write_all(&buf[..len]);
                    if buf.len() == CHUNK {
                        let _ = recycle.try_send(buf);
                    }
                    if let Err(source) = written {
                        return Err(self.sink_error(source));
                    }
                }
                Ok(Job::EndFile) => return self.end().map(|()| true),
                Ok(_) => return Err(out_of_order()),
                Err(_) => return Ok(false),
            }
        }
    }

    fn sink_error(self, source: io::Error) -> VerifyError {
        VerifyError::Sink {
            path: self.path,
            source,
        }
    }

    fn end(mut self) -> Result<(), VerifyError> {
        match self.out.flush() {
            Ok(()) => Ok(()),
            Err(source) => Err(self.sink_error(source)),
        }
    }
}
