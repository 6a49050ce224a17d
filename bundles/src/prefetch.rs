//! [`Prefetch`]: reads a file on a thread of its own, ahead of the consumer, so that the
//! `read(2)` copies of a large bundle overlap with decompressing and hashing it.
//!
//! Memory stays bounded: at most [`AHEAD`] buffers of [`BLOCK`] bytes are in flight, and they
//! are recycled.

use std::io::{self, BufRead, Read};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

/// Buffers read ahead.
pub const AHEAD: usize = 4;
/// Size of each read.
pub const BLOCK: usize = 1 << 20;

/// A [`Read`] over another reader that runs on a worker thread.
pub struct Prefetch {
    blocks: Option<Receiver<io::Result<Vec<u8>>>>,
    recycle: Option<SyncSender<Vec<u8>>>,
    current: Vec<u8>,
    pos: usize,
    worker: Option<JoinHandle<()>>,
}

impl Prefetch {
    /// Starts reading `inner` on a worker thread.
    ///
    /// # Errors
    ///
    /// The thread cannot be spawned.
    pub fn spawn<R: Read + Send + 'static>(inner: R) -> io::Result<Self> {
        let (tx, blocks) = mpsc::sync_channel(AHEAD);
        let (recycle, spare) = mpsc::sync_channel::<Vec<u8>>(AHEAD + 2);
        let worker = std::thread::Builder::new()
            .name("bundle-reader".into())
            .spawn(move || read_ahead(inner, &tx, &spare))?;
        Ok(Self {
            blocks: Some(blocks),
            recycle: Some(recycle),
            current: Vec::new(),
            pos: 0,
            worker: Some(worker),
        })
    }
}

fn read_ahead<R: Read>(
    mut inner: R,
    tx: &SyncSender<io::Result<Vec<u8>>>,
    spare: &Receiver<Vec<u8>>,
) {
    loop {
        let mut buf = spare.try_recv().unwrap_or_default();
        buf.resize(BLOCK, 0);
        let mut filled = 0;
        let result = loop {
            match inner.read(&mut buf[filled..]) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    filled += n;
                    if filled == buf.len() {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        buf.truncate(filled);
        let end = filled == 0;
        let message = match result {
            Ok(()) => Ok(buf),
            Err(e) => Err(e),
        };
        let failed = message.is_err();
        if tx.send(message).is_err() || end || failed {
            return;
        }
    }
}

impl Prefetch {
    /// Makes the next block current once the current one is used up; false at the end.
    fn next_block(&mut self) -> io::Result<bool> {
        while self.pos == self.current.len() {
            let Some(blocks) = &self.blocks else {
                return Ok(false);
            };
            match blocks.recv() {
                Ok(Ok(block)) if block.is_empty() => {
                    self.blocks = None;
                    return Ok(false);
                }
                Ok(Ok(block)) => {
                    let used = std::mem::replace(&mut self.current, block);
                    self.pos = 0;
                    if let Some(recycle) = &self.recycle {
                        let _ = recycle.try_send(used);
                    }
                }
                Ok(Err(e)) => {
                    self.blocks = None;
                    return Err(e);
                }
                Err(_) => {
                    self.blocks = None;
                    return Err(io::Error::other("the bundle reader stopped early"));
                }
            }
        }
        Ok(true)
    }
}

impl Read for Prefetch {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = out.len().min(available.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

/// Consumers that take a [`BufRead`] (the zstd decoder) read the blocks in place: no copy.
impl BufRead for Prefetch {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.next_block()? {
            Ok(&self.current[self.pos..])
        } else {
            Ok(&[])
        }
    }

    fn consume(&mut self, amount: usize) {
        self.pos = (self.pos + amount).min(self.current.len());
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        // Unblock the worker (its send fails once the receiver is gone), then wait for it.
        self.blocks = None;
        self.recycle = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_everything_in_order_through_read_and_bufread() {
        let data: Vec<u8> = (0..(3 * BLOCK + 123)).map(|i| (i % 253) as u8).collect();
        let mut out = Vec::new();
        Prefetch::spawn(io::Cursor::new(data.clone()))
            .expect("spawn")
            .read_to_end(&mut out)
            .expect("read");
        assert_eq!(out, data);

        let mut p = Prefetch::spawn(io::Cursor::new(data.clone())).expect("spawn");
        let mut seen = 0;
        loop {
            let buf = p.fill_buf().expect("fill");
            if buf.is_empty() {
                break;
            }
            assert_eq!(buf[0], data[seen]);
            let n = buf.len().min(777);
            seen += n;
            p.consume(n);
        }
        assert_eq!(seen, data.len());
    }

    struct Failing(usize);

    impl Read for Failing {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Err(io::Error::other("disk on fire"));
            }
            let n = out.len().min(self.0);
            self.0 -= n;
            Ok(n)
        }
    }

    #[test]
    fn a_read_error_reaches_the_consumer_after_the_good_bytes() {
        let mut out = Vec::new();
        let err = Prefetch::spawn(Failing(BLOCK + 10))
            .expect("spawn")
            .read_to_end(&mut out)
            .expect_err("error");
        assert!(err.to_string().contains("disk on fire"), "{err}");
        assert!(out.len() >= BLOCK, "bytes before the error arrive first");
    }

    #[test]
    fn dropping_early_stops_the_reader() {
        // An endless source: dropping must still return (the worker stops on a closed channel).
        let mut p = Prefetch::spawn(io::repeat(1)).expect("spawn");
        let mut buf = [0u8; 10];
        p.read_exact(&mut buf).expect("read");
        drop(p);
    }
}
