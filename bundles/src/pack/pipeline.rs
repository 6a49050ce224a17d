//! The packing pipeline: three stages on their own threads, joined by bounded channels.
//!
//! ```text
//! caller (tar framing, reads sources        compressor thread             writer thread
//!  straight into 1 MiB chunks, hashes them) ──chunks──▶ zstd encoder ──chunks──▶ sha256 + write(2)
//!                        ▲                  (zstdmt workers)                       │
//!                        └──────────── empty chunks come back through pools ◀──────┘
//! ```
//!
//! Memory is bounded: each stage holds at most [`DEPTH`] chunks in flight, and chunk buffers
//! are recycled instead of reallocated.

use std::io::{self, Read, Write};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::{self, JoinHandle};

use sha2::{Digest, Sha256};

/// Size of one chunk.
pub(super) const CHUNK: usize = 1 << 20;
/// Size of the writes to the output file.
const WRITE_PIECE: usize = 128 << 10;
/// Chunks queued between two stages.
const DEPTH: usize = 2;

/// A buffer and how much of it is filled.
pub(super) struct Chunk {
    buf: Vec<u8>,
    len: usize,
}

/// What flows between stages.
pub(super) enum Msg {
    Data(Chunk),
    /// Everything was sent: finish the stream. A closed channel without `End` means abort.
    End,
}

/// Recycled buffers, bounded by the channel depth (allocated on demand up to that).
struct Pool {
    returned: Receiver<Vec<u8>>,
    recycle: SyncSender<Vec<u8>>,
}

impl Pool {
    fn new() -> Self {
        let (recycle, returned) = mpsc::sync_channel(DEPTH + 2);
        Self { returned, recycle }
    }

    fn take(&self) -> Chunk {
        let buf = self.returned.try_recv().unwrap_or_else(|_| vec![0; CHUNK]);
        Chunk { buf, len: 0 }
    }

    fn recycler(&self) -> SyncSender<Vec<u8>> {
        self.recycle.clone()
    }
}

/// Gives a used buffer back to its pool; dropped if the pool is full or gone.
fn recycle(to: &SyncSender<Vec<u8>>, buf: Vec<u8>) {
    let _ = to.try_send(buf);
}

const CLOSED: &str = "pack pipeline stage stopped";

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, CLOSED)
}

/// Fills chunks and sends them downstream; the head of a stage.
pub(super) struct ChunkWriter {
    pool: Pool,
    current: Chunk,
    tx: SyncSender<Msg>,
}

impl ChunkWriter {
    fn new(tx: SyncSender<Msg>) -> Self {
        let pool = Pool::new();
        let current = pool.take();
        Self { pool, current, tx }
    }

    /// A writer whose channel is only drained by the caller (tests with less than a chunk).
    #[cfg(test)]
    pub(super) fn unconnected() -> (Self, Receiver<Msg>) {
        let (tx, rx) = mpsc::sync_channel(DEPTH);
        (Self::new(tx), rx)
    }

    fn send_current(&mut self) -> io::Result<()> {
        if self.current.len == 0 {
            return Ok(());
        }
        let full = std::mem::replace(&mut self.current, self.pool.take());
        self.tx.send(Msg::Data(full)).map_err(|_| closed())
    }

    /// Reads up to `limit` bytes of `reader` straight into the chunks, hashing them if asked;
    /// returns how many bytes it got (fewer only at end of file).
    pub(super) fn read_from(
        &mut self,
        reader: &mut dyn Read,
        limit: u64,
        mut hasher: Option<&mut Sha256>,
    ) -> Result<u64, ReadFromError> {
        let mut done = 0u64;
        while done < limit {
            if self.current.len == CHUNK {
                self.send_current().map_err(ReadFromError::Write)?;
            }
            let room = CHUNK - self.current.len;
            let want = usize::try_from(limit - done).map_or(room, |left| left.min(room));
            let start = self.current.len;
            let n = match reader.read(&mut self.current.buf[start..start + want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ReadFromError::Read(e)),
            };
            if let Some(hasher) = hasher.as_mut() {
                hasher.update(&self.current.buf[start..start + n]);
            }
            self.current.len += n;
            done += n as u64;
        }
        Ok(done)
    }

    /// Sends what is buffered and the end marker.
    fn end(mut self) -> io::Result<()> {
        self.send_current()?;
        self.tx.send(Msg::End).map_err(|_| closed())
    }
}

/// [`ChunkWriter::read_from`] failed reading the source or sending downstream.
#[derive(Debug)]
pub(super) enum ReadFromError {
    Read(io::Error),
    Write(io::Error),
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.current.len == CHUNK {
            self.send_current()?;
        }
        let n = data.len().min(CHUNK - self.current.len);
        let start = self.current.len;
        self.current.buf[start..start + n].copy_from_slice(&data[..n]);
        self.current.len += n;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The running compressor and writer threads, fed through [`Pipeline::input`].
pub(super) struct Pipeline {
    input: ChunkWriter,
    compressor: JoinHandle<io::Result<()>>,
    writer: JoinHandle<io::Result<Written>>,
}

/// [`Pipeline::start`] failed.
pub(super) enum StartError<E> {
    /// Making the encoder.
    Encoder(E),
    /// Starting a thread.
    Spawn(io::Error),
}

/// What reached the file.
pub(super) struct Written {
    pub(super) file: fs_err::File,
    pub(super) sha256: String,
    pub(super) bytes: u64,
}

type Encoder = zstd::stream::write::Encoder<'static, ChunkWriter>;

impl Pipeline {
    /// Starts the stages; `make_encoder` wraps the compressor's output in a zstd encoder.
    pub(super) fn start<E>(
        file: fs_err::File,
        make_encoder: impl FnOnce(ChunkWriter) -> Result<Encoder, E>,
    ) -> Result<Self, StartError<E>> {
        let (to_writer, writer_rx) = mpsc::sync_channel(DEPTH);
        let (to_compressor, compressor_rx) = mpsc::sync_channel(DEPTH);
        let compressed = ChunkWriter::new(to_writer);
        let written_recycler = compressed.pool.recycler();
        let encoder = make_encoder(compressed).map_err(StartError::Encoder)?;
        let input = ChunkWriter::new(to_compressor);
        let input_recycler = input.pool.recycler();
        let compressor = thread::Builder::new()
            .name("pack-zstd".into())
            .spawn(move || compress(encoder, &compressor_rx, &input_recycler))
            .map_err(StartError::Spawn)?;
        let writer = thread::Builder::new()
            .name("pack-write".into())
            .spawn(move || write_out(file, &writer_rx, &written_recycler))
            .map_err(StartError::Spawn)?;
        Ok(Self {
            input,
            compressor,
            writer,
        })
    }

    /// Where the tar stream goes.
    pub(super) fn input(&mut self) -> &mut ChunkWriter {
        &mut self.input
    }

    /// Ends the stream and waits for the file to be complete (not yet synced).
    pub(super) fn finish(self) -> io::Result<Written> {
        let sent = self.input.end();
        let compressed = join(self.compressor);
        let written = join(self.writer);
        match (sent, compressed, written) {
            (Ok(()), Ok(()), Ok(w)) => Ok(w),
            (sent, compressed, written) => {
                Err(cause([sent.err(), compressed.err(), written.err()]).unwrap_or_else(closed))
            }
        }
    }

    /// Stops after a failure upstream; returns a downstream error that may explain it.
    pub(super) fn abort(self) -> Option<io::Error> {
        drop(self.input);
        let compressed = join(self.compressor).err();
        let written = join(self.writer).err();
        cause([compressed, written]).filter(|e| !is_closed(e))
    }
}

/// The error that explains the others: a stage that stopped makes its neighbours see a closed
/// channel, so any other error wins over [`closed`].
fn cause<const N: usize>(errors: [Option<io::Error>; N]) -> Option<io::Error> {
    let mut found = None;
    for e in errors.into_iter().flatten() {
        match &found {
            Some(f) if !is_closed(f) => {}
            _ => found = Some(e),
        }
    }
    found
}

fn is_closed(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe && e.to_string() == CLOSED
}

fn join<T>(handle: JoinHandle<io::Result<T>>) -> io::Result<T> {
    handle
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("pack pipeline thread panicked")))
}

/// The compressor stage: feeds chunks to zstd until `End`; a closed channel aborts.
fn compress(
    mut encoder: Encoder,
    rx: &Receiver<Msg>,
    recycler: &SyncSender<Vec<u8>>,
) -> io::Result<()> {
    loop {
        match rx.recv() {
            Ok(Msg::Data(chunk)) => {
                encoder.write_all(&chunk.buf[..chunk.len])?;
                recycle(recycler, chunk.buf);
            }
            Ok(Msg::End) => return encoder.finish()?.end(),
            Err(_) => return Err(closed()),
        }
    }
}

/// The writer stage: hashes and writes chunks until `End`; a closed channel aborts.
fn write_out(
    mut file: fs_err::File,
    rx: &Receiver<Msg>,
    recycler: &SyncSender<Vec<u8>>,
) -> io::Result<Written> {
    let mut hasher = Sha256::new();
    let mut bytes = 0u64;
    loop {
        match rx.recv() {
            Ok(Msg::Data(chunk)) => {
                // Hash and write in cache-sized pieces, so write(2) copies hot data.
                for piece in chunk.buf[..chunk.len].chunks(WRITE_PIECE) {
                    hasher.update(piece);
                    file.write_all(piece)?;
                }
                bytes += chunk.len as u64;
                recycle(recycler, chunk.buf);
            }
            Ok(Msg::End) => {
                return Ok(Written {
                    file,
                    sha256: hex::encode(hasher.finalize()),
                    bytes,
                })
            }
            Err(_) => return Err(closed()),
        }
    }
}
