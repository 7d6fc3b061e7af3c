//! Temporary files for operators that outgrow their memory budget (`work_mem`): sorts write
//! sorted runs and merge them, hash joins and hash aggregates partition their rows by key
//! hash and process a partition at a time.
//!
//! Owns: the row codec of temporary files, [`SpillFile`] (rows appended, then read back once
//! in order), [`Partitions`] (one file per hash partition) and [`row_bytes`] (the memory a row
//! is counted as). Files live in `NVMEDB_TEMP_DIR` (default: the system's temporary
//! directory) and are unlinked as soon as they are created, so nothing is left behind by a
//! crash. Invariant: a row reads back exactly as written.

use super::Row;
use crate::datetime::Interval;
use crate::error::{code, SqlError, SqlResult};
use crate::types::Datum;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(0);

fn io(what: &str, e: std::io::Error) -> SqlError {
    SqlError::new(code::DISK_FULL_OR_TEMP, format!("temporary file: {what}: {e}"))
}

/// Bytes a row is counted as in memory.
pub fn row_bytes(r: &Row) -> usize {
    24 + r
        .iter()
        .map(|d| {
            std::mem::size_of::<Datum>()
                + match d {
                    Datum::Text(t) => t.capacity(),
                    Datum::Bytes(b) => b.capacity(),
                    _ => 0,
                }
        })
        .sum::<usize>()
}

fn encode(r: &Row, out: &mut Vec<u8>) {
    out.extend_from_slice(&(r.len() as u32).to_le_bytes());
    for d in r {
        match d {
            Datum::Null => out.push(0),
            Datum::Bool(b) => out.extend_from_slice(&[1, u8::from(*b)]),
            Datum::Int(v) => {
                out.push(2);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Datum::Float(v) => {
                out.push(3);
                out.extend_from_slice(&v.to_bits().to_le_bytes());
            }
            Datum::Numeric(v, s) => {
                out.push(4);
                out.extend_from_slice(&v.to_le_bytes());
                out.push(*s);
            }
            Datum::Text(t) => {
                out.push(5);
                out.extend_from_slice(&(t.len() as u32).to_le_bytes());
                out.extend_from_slice(t.as_bytes());
            }
            Datum::Bytes(b) => {
                out.push(6);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            Datum::Timestamp(v) => {
                out.push(7);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Datum::Date(v) => {
                out.push(8);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Datum::Interval(iv) => {
                out.push(9);
                out.extend_from_slice(&iv.months.to_le_bytes());
                out.extend_from_slice(&iv.days.to_le_bytes());
                out.extend_from_slice(&iv.micros.to_le_bytes());
            }
            Datum::Array(items) => {
                let b = crate::array::encode(items);
                out.push(10);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(&b);
            }
        }
    }
}

fn read_n<const N: usize>(r: &mut impl Read) -> SqlResult<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b).map_err(|e| io("read", e))?;
    Ok(b)
}

fn decode(r: &mut impl Read) -> SqlResult<Row> {
    let n = u32::from_le_bytes(read_n::<4>(r)?) as usize;
    let mut row = Vec::with_capacity(n);
    for _ in 0..n {
        let tag = read_n::<1>(r)?[0];
        row.push(match tag {
            0 => Datum::Null,
            1 => Datum::Bool(read_n::<1>(r)?[0] != 0),
            2 => Datum::Int(i64::from_le_bytes(read_n::<8>(r)?)),
            3 => Datum::Float(f64::from_bits(u64::from_le_bytes(read_n::<8>(r)?))),
            4 => {
                let v = i128::from_le_bytes(read_n::<16>(r)?);
                Datum::Numeric(v, read_n::<1>(r)?[0])
            }
            5 | 6 => {
                let len = u32::from_le_bytes(read_n::<4>(r)?) as usize;
                let mut b = vec![0; len];
                r.read_exact(&mut b).map_err(|e| io("read", e))?;
                if tag == 5 {
                    Datum::Text(
                        String::from_utf8(b)
                            .map_err(|_| io("read", std::io::ErrorKind::InvalidData.into()))?,
                    )
                } else {
                    Datum::Bytes(b)
                }
            }
            7 => Datum::Timestamp(i64::from_le_bytes(read_n::<8>(r)?)),
            10 => {
                let mut b = vec![0; u32::from_le_bytes(read_n::<4>(r)?) as usize];
                r.read_exact(&mut b).map_err(|e| io("read", e))?;
                Datum::Array(crate::array::decode(&b, "spilled row")?)
            }
            8 => Datum::Date(i32::from_le_bytes(read_n::<4>(r)?)),
            9 => Datum::Interval(Interval {
                months: i32::from_le_bytes(read_n::<4>(r)?),
                days: i32::from_le_bytes(read_n::<4>(r)?),
                micros: i64::from_le_bytes(read_n::<8>(r)?),
            }),
            t => return Err(io("read", std::io::Error::other(format!("bad tag {t}")))),
        });
    }
    Ok(row)
}

/// A temporary file of rows.
pub struct SpillFile {
    w: BufWriter<File>,
    rows: u64,
    bytes: u64,
    buf: Vec<u8>,
}

impl SpillFile {
    /// A new, empty, already unlinked file.
    pub fn new() -> SqlResult<Self> {
        let dir = std::env::var_os("NVMEDB_TEMP_DIR").map_or_else(std::env::temp_dir, Into::into);
        let path =
            dir.join(format!("nvmedb-spill-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io(&path.display().to_string(), e))?;
        let _ = std::fs::remove_file(&path);
        Ok(Self { w: BufWriter::with_capacity(64 << 10, f), rows: 0, bytes: 0, buf: Vec::new() })
    }

    /// Appends a row.
    pub fn push(&mut self, r: &Row) -> SqlResult<()> {
        self.buf.clear();
        encode(r, &mut self.buf);
        self.w.write_all(&self.buf).map_err(|e| io("write", e))?;
        self.rows += 1;
        self.bytes += self.buf.len() as u64;
        Ok(())
    }

    /// Bytes written.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Reads the rows back, in order.
    pub fn into_reader(self) -> SqlResult<Reader> {
        let rows = self.rows;
        let mut f = self.w.into_inner().map_err(|e| io("flush", e.into_error()))?;
        f.seek(SeekFrom::Start(0)).map_err(|e| io("seek", e))?;
        Ok(Reader { r: Some(BufReader::with_capacity(64 << 10, f)), left: rows })
    }
}

/// Rows of a [`SpillFile`], read back.
pub struct Reader {
    r: Option<BufReader<File>>,
    left: u64,
}

impl Reader {
    /// A reader of no rows.
    pub fn empty() -> Self {
        Self { r: None, left: 0 }
    }

    /// The next row.
    pub fn next_row(&mut self) -> SqlResult<Option<Row>> {
        if self.left == 0 {
            self.r = None;
            return Ok(None);
        }
        self.left -= 1;
        decode(self.r.as_mut().expect("rows left")).map(Some)
    }
}

/// Rows partitioned by hash into files.
pub struct Partitions {
    files: Vec<Option<SpillFile>>,
    bytes: u64,
}

impl Partitions {
    /// `n` partitions (files are created when a row first goes to them).
    pub fn new(n: usize) -> SqlResult<Self> {
        Ok(Self { files: (0..n).map(|_| None).collect(), bytes: 0 })
    }

    /// Appends `r` to the partition of hash `h`.
    pub fn push(&mut self, h: u64, r: &Row) -> SqlResult<()> {
        let n = self.files.len() as u64;
        let f = &mut self.files[(h % n) as usize];
        if f.is_none() {
            *f = Some(SpillFile::new()?);
        }
        let f = f.as_mut().expect("created above");
        let before = f.bytes();
        f.push(r)?;
        self.bytes += f.bytes() - before;
        Ok(())
    }

    /// Bytes written to all partitions.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The rows of partition `i` (once).
    pub fn take(&mut self, i: usize) -> SqlResult<Reader> {
        match self.files[i].take() {
            Some(f) => f.into_reader(),
            None => Ok(Reader::empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_as_written() {
        let rows = vec![
            vec![Datum::Null, Datum::Bool(true), Datum::Int(-7), Datum::Float(1.5)],
            vec![Datum::Numeric(-12345, 2), Datum::Text("héllo".into()), Datum::Bytes(vec![0, 255])],
            vec![
                Datum::Timestamp(123),
                Datum::Date(-5),
                Datum::Interval(Interval { months: 1, days: 2, micros: 3 }),
            ],
            vec![],
        ];
        let mut f = SpillFile::new().unwrap();
        for r in &rows {
            f.push(r).unwrap();
        }
        let mut rd = f.into_reader().unwrap();
        for r in &rows {
            assert_eq!(rd.next_row().unwrap().as_ref(), Some(r));
        }
        assert_eq!(rd.next_row().unwrap(), None);
        let mut p = Partitions::new(4).unwrap();
        for i in 0..100 {
            p.push(i, &vec![Datum::Int(i as i64)]).unwrap();
        }
        let mut seen = 0;
        for i in 0..4 {
            let mut r = p.take(i).unwrap();
            while let Some(row) = r.next_row().unwrap() {
                assert_eq!(row[0], Datum::Int(row[0].as_f64().unwrap() as i64));
                seen += 1;
            }
        }
        assert_eq!(seen, 100);
    }
}
