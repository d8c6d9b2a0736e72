//! The counts a Parquet file states about itself, checked against each other, against the
//! file's length and against the memory available before polars decodes a value. polars
//! sizes its buffers from these counts: a damaged page header that claims a negative
//! number of values makes its level decoder reserve 2^61 bytes and abort the process
//! (found by the fuzz harness, issue 54). Only the footer and the page headers are read.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use polars_parquet::parquet::metadata::{ColumnChunkMetadata, FileMetadata};
use polars_parquet_format::thrift::protocol::TCompactInputProtocol;
use polars_parquet_format::{PageHeader, PageType};

use asa_core::error::{Error, InputKind, Result};

/// Bytes a decoded cell takes in the crate's [`super::Table`] (an `Option<f64>`, or a
/// string's pointer, length and capacity): what a claimed row count costs in memory.
const CELL_BYTES: u64 = 24;

/// The largest page header read (polars reads headers without a bound; one holds a page's
/// statistics, which polars' writer truncates to a few bytes unless told not to).
const MAX_HEADER_BYTES: usize = 1 << 24;

/// What to hold in memory at once when the file is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// The whole table (`read_table`).
    Whole,
    /// One row group at a time (`for_each_row`).
    RowGroupAtATime,
}

/// Checks every count `file` (of `path`) states: the row groups' rows against the footer's,
/// column chunks against their row group and the file's length, page headers against their
/// column chunk; and the cells to decode at once (per `decoded`) against the memory
/// available. A count that disagrees is an error naming the file and the count.
pub fn check(path: &Path, file: &mut std::fs::File, decoded: Decoded) -> Result<()> {
    let length = file.metadata().map_err(|e| Error::io(path, e))?.len();
    check_footer(file, length)
        .map_err(|what| Error::table(path, format!("damaged Parquet table: its footer {what}")))?;
    let metadata = polars_parquet::parquet::read::read_metadata(file).map_err(|e| {
        Error::invalid(path, "cannot read Parquet table", e).about(InputKind::Table)
    })?;
    let damaged = |what: String| Error::table(path, format!("damaged Parquet table: {what}"));
    // polars decodes each row group by its own row count, whatever the footer's total says
    let rows = metadata
        .row_groups
        .iter()
        .fold(0usize, |sum, g| sum.saturating_add(g.num_rows()));
    if rows != metadata.num_rows {
        let stated = metadata.num_rows;
        return Err(damaged(format!(
            "its row groups hold {rows} rows, its footer states {stated}"
        )));
    }
    let free = asa_core::host_memory::available_memory().unwrap_or(u64::MAX);
    check_memory(path, &metadata, decoded, free)?;
    let mut reader = BufReader::new(file);
    for (g, group) in metadata.row_groups.iter().enumerate() {
        for chunk in group.parquet_columns() {
            let name = chunk.descriptor().path_in_schema.join(".");
            check_chunk(&mut reader, chunk, group.num_rows(), length, free)
                .map_err(|what| damaged(format!("row group {g}, column {name}: {what}")))?;
        }
    }
    Ok(())
}

/// A column as polars decoded it against the table's rows: a damaged page can decode to
/// fewer values than its header states (polars' release build does not check: its debug
/// build asserts), which would leave the column shorter than the table (found by the fuzz
/// harness, issue 54).
pub fn check_decoded(path: &Path, column: &str, values: usize, rows: usize) -> Result<()> {
    if values == rows {
        return Ok(());
    }
    Err(Error::table(
        path,
        format!(
            "damaged Parquet table: column {column} decoded to {values} values for {rows} rows"
        ),
    ))
}

/// The footer's lists against its length, before polars reads it: polars reserves what a
/// list states it holds (a footer claiming 2^31 row groups asked for 136 GB and aborted:
/// found by the coverage-guided fuzzing, issue 65). The footer is read first by thrift's
/// own reader of the same structure, within a budget of 8 bytes for each of its bytes:
/// every element of a list takes at least one byte and the reader charges 8 for it, so no
/// list can state more elements than the footer has bytes.
fn check_footer(file: &mut std::fs::File, length: u64) -> std::result::Result<(), String> {
    let mut tail = [0u8; 8];
    if length < 12 {
        return Err(format!("is missing: the file has {length} bytes"));
    }
    file.seek(SeekFrom::Start(length - 8))
        .and_then(|_| file.read_exact(&mut tail))
        .map_err(|e| format!("cannot be read ({e})"))?;
    let stated = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if &tail[4..] != b"PAR1" || stated > length - 12 {
        // polars names what is wrong with the end of the file
        return Ok(());
    }
    file.seek(SeekFrom::Start(length - 8 - stated))
        .map_err(|e| format!("cannot be read ({e})"))?;
    let budget = usize::try_from(stated.saturating_mul(8)).unwrap_or(usize::MAX);
    let mut protocol = TCompactInputProtocol::new(BufReader::new(&mut *file).take(stated), budget);
    let walked = polars_parquet_format::FileMetaData::read_from_in_protocol(&mut protocol);
    file.seek(SeekFrom::Start(0))
        .map_err(|e| format!("cannot be read ({e})"))?;
    walked
        .map(|_| ())
        .map_err(|e| format!("states more than its {stated} bytes hold ({e})"))
}

/// The cells decoded at once against the memory this process may still take.
fn check_memory(path: &Path, metadata: &FileMetadata, decoded: Decoded, free: u64) -> Result<()> {
    let columns = metadata.schema_descr.columns().len() as u64;
    let rows = match decoded {
        Decoded::Whole => metadata.num_rows,
        Decoded::RowGroupAtATime => metadata.max_row_group_height,
    } as u64;
    let need = rows.saturating_mul(columns).saturating_mul(CELL_BYTES);
    if need <= free {
        return Ok(());
    }
    Err(Error::table(
        path,
        format!(
            "the table states {rows} rows of {columns} columns, {:.1} GiB decoded, more than \
                 the {:.1} GiB of memory available (a damaged file?)",
            need as f64 / f64::from(1 << 30),
            free as f64 / f64::from(1 << 30),
        ),
    ))
}

/// One column chunk: inside the file, as many values as its row group has rows (one per row
/// for a flat column, at least that for a repeated one), and pages that add up to them.
fn check_chunk(
    reader: &mut BufReader<&mut std::fs::File>,
    chunk: &ColumnChunkMetadata,
    rows: usize,
    length: u64,
    free: u64,
) -> std::result::Result<(), String> {
    // as polars' `byte_range` (which unwraps an overflowing end), checked
    let start = chunk
        .dictionary_page_offset()
        .unwrap_or(chunk.data_page_offset());
    let size = chunk.compressed_size();
    let end = start.checked_add(size).filter(|_| start >= 0 && size >= 0);
    let range = match end {
        Some(end) if end as u64 <= length => start as u64..end as u64,
        _ => {
            return Err(format!(
                "its bytes at {start} of {size} lie outside the file's {length}"
            ))
        }
    };
    let values = chunk.num_values();
    let flat = chunk.descriptor().descriptor.max_rep_level == 0;
    let rows = rows as i64;
    if values < 0 || (flat && values != rows) || (!flat && values < rows) {
        return Err(format!("{values} values for {rows} rows"));
    }
    reader
        .seek(SeekFrom::Start(range.start))
        .map_err(|e| e.to_string())?;
    let mut at = range.start;
    let mut seen = 0i64;
    while seen < values {
        let header = read_header(reader).map_err(|e| format!("page at byte {at}: {e}"))?;
        let header_end = reader.stream_position().map_err(|e| e.to_string())?;
        let page = check_page(&header, values - seen, free)
            .map_err(|e| format!("page at byte {at}: {e}"))?;
        at = header_end + page.compressed;
        if at > range.end {
            return Err(format!(
                "a page ends at byte {at}, past the column's end {}",
                range.end
            ));
        }
        seen += page.values;
        reader
            .seek(SeekFrom::Start(at))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn read_header(reader: &mut impl Read) -> std::result::Result<PageHeader, String> {
    let mut protocol = TCompactInputProtocol::new(reader, MAX_HEADER_BYTES);
    PageHeader::read_from_in_protocol(&mut protocol).map_err(|e| format!("unreadable header ({e})"))
}

/// What one page adds: its data values, and its bytes after the header.
struct Page {
    values: i64,
    compressed: u64,
}

/// A page's counts: sizes not negative, at most `remaining` values, null and row counts
/// inside its values, level bytes inside its bytes, a dictionary's entries inside its bytes
/// (each takes at least one; a dictionary written whole into every row group may hold more
/// entries than the chunk has values), and its decompressed bytes inside the memory
/// available (`free`).
fn check_page(header: &PageHeader, remaining: i64, free: u64) -> std::result::Result<Page, String> {
    let sizes = [header.compressed_page_size, header.uncompressed_page_size];
    if sizes.iter().any(|&s| s < 0) {
        return Err(format!("negative page size {sizes:?}"));
    }
    if header.uncompressed_page_size as u64 > free {
        return Err(format!(
            "{} bytes decompressed, more than the memory available",
            header.uncompressed_page_size
        ));
    }
    let compressed = header.compressed_page_size as u64;
    let within = |what: &str, n: i32, most: i64| {
        if n < 0 || i64::from(n) > most {
            Err(format!("{what} {n}, outside 0..={most}"))
        } else {
            Ok(i64::from(n))
        }
    };
    let values = match header.type_ {
        PageType::DATA_PAGE => {
            let data = header
                .data_page_header
                .as_ref()
                .ok_or("no data page header")?;
            within("values", data.num_values, remaining)?
        }
        PageType::DATA_PAGE_V2 => {
            let data = header
                .data_page_header_v2
                .as_ref()
                .ok_or("no data page header")?;
            let values = within("values", data.num_values, remaining)?;
            within("nulls", data.num_nulls, values)?;
            within("rows", data.num_rows, values)?;
            let levels = within(
                "definition level bytes",
                data.definition_levels_byte_length,
                compressed as i64,
            )? + within(
                "repetition level bytes",
                data.repetition_levels_byte_length,
                compressed as i64,
            )?;
            if levels > compressed as i64 {
                return Err(format!("{levels} level bytes in a page of {compressed}"));
            }
            values
        }
        PageType::DICTIONARY_PAGE => {
            let dictionary = header
                .dictionary_page_header
                .as_ref()
                .ok_or("no dictionary page header")?;
            let bytes = i64::from(header.uncompressed_page_size);
            within("dictionary entries", dictionary.num_values, bytes)?;
            0
        }
        _ => 0,
    };
    Ok(Page { values, compressed })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{write_table, Column, Format, Table};
    use asa_core::error::{ErrorKind, InputKind};
    use polars_parquet_format::thrift::protocol::TCompactOutputProtocol;

    /// A table of `rows` rows in Parquet, its path and its bytes.
    fn written(dir: &Path, rows: usize) -> (std::path::PathBuf, Vec<u8>) {
        let path = dir.join("t.parquet");
        let values = (0..rows).map(|i| Some(i as f64 * 0.5)).collect();
        let ids = (0..rows).map(|i| Some(i as i64)).collect();
        let table = Table::new(
            "t",
            vec![("step", Column::Int(ids)), ("value", Column::Float(values))],
        );
        write_table(&table, &path, Format::Parquet).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        (path, bytes)
    }

    /// Rewrites the first data page header of the first column chunk with `edit` applied;
    /// the header keeps its length (the edits only swap one small varint for another).
    fn with_first_header(bytes: &[u8], edit: impl FnOnce(&mut PageHeader)) -> Vec<u8> {
        let mut cursor = std::io::Cursor::new(bytes);
        let metadata = polars_parquet::parquet::read::read_metadata(&mut cursor).unwrap();
        let mut start = metadata.row_groups[0].parquet_columns()[0]
            .byte_range()
            .start as usize;
        let (mut header, old_length) = loop {
            let mut rest = &bytes[start..];
            let header = read_header(&mut rest).unwrap();
            let length = bytes.len() - start - rest.len();
            if header.type_ != PageType::DICTIONARY_PAGE {
                break (header, length);
            }
            start += length + header.compressed_page_size as usize;
        };
        edit(&mut header);
        let mut encoded = Vec::new();
        header
            .write_to_out_protocol(&mut TCompactOutputProtocol::new(&mut encoded))
            .unwrap();
        assert_eq!(
            encoded.len(),
            old_length,
            "the edit changed the header's length"
        );
        let mut out = bytes.to_vec();
        out[start..start + old_length].copy_from_slice(&encoded);
        out
    }

    fn checked(path: &Path, bytes: &[u8]) -> Result<()> {
        std::fs::write(path, bytes).unwrap();
        check(
            path,
            &mut std::fs::File::open(path).unwrap(),
            Decoded::Whole,
        )
    }

    fn num_values(header: &mut PageHeader) -> &mut i32 {
        match header.data_page_header.as_mut() {
            Some(v1) => &mut v1.num_values,
            None => &mut header.data_page_header_v2.as_mut().unwrap().num_values,
        }
    }

    #[test]
    fn a_table_as_written_passes_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = written(dir.path(), 40);
        checked(&path, &bytes).unwrap();
        assert_eq!(crate::read_table(&path).unwrap().height(), 40);
    }

    #[test]
    fn a_page_stating_values_its_chunk_has_not_is_refused_naming_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = written(dir.path(), 40);
        for (claim, said) in [
            (-1, "values -1, outside 0..=40"),
            (41, "values 41, outside 0..=40"),
        ] {
            let damaged = with_first_header(&bytes, |h| *num_values(h) = claim);
            let err = checked(&path, &damaged).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Input(InputKind::Table));
            let err = err.to_string();
            assert!(
                err.contains("t.parquet") && err.contains("column step") && err.contains(said),
                "{err}"
            );
            // and what the readers say: the same error, nothing decoded
            let read = crate::read_table(&path).unwrap_err().to_string();
            assert!(read.contains(said), "{read}");
            let rows = crate::for_each_row(&path, &["value"], |_| Ok(()));
            assert!(rows.unwrap_err().to_string().contains(said));
        }
    }

    #[test]
    fn negative_or_oversized_page_bytes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = written(dir.path(), 40);
        let negative = with_first_header(&bytes, |h| h.compressed_page_size = -3);
        let err = checked(&path, &negative).unwrap_err().to_string();
        assert!(err.contains("negative page size"), "{err}");
        // a page whose bytes run past its column chunk (the size's varint keeps its length)
        let long = with_first_header(&bytes, |h| h.compressed_page_size += 1);
        let err = checked(&path, &long).unwrap_err().to_string();
        assert!(err.contains("past the column's end"), "{err}");
    }

    /// `bytes` with its footer (thrift FileMetaData) rewritten by `edit`.
    fn with_footer(
        bytes: &[u8],
        edit: impl FnOnce(&mut polars_parquet_format::FileMetaData),
    ) -> Vec<u8> {
        let n = bytes.len();
        let footer_len = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
        let start = n - 8 - footer_len;
        let mut footer = &bytes[start..n - 8];
        let mut protocol = TCompactInputProtocol::new(&mut footer, 1 << 20);
        let mut metadata =
            polars_parquet_format::FileMetaData::read_from_in_protocol(&mut protocol).unwrap();
        edit(&mut metadata);
        let mut encoded = Vec::new();
        metadata
            .write_to_out_protocol(&mut TCompactOutputProtocol::new(&mut encoded))
            .unwrap();
        let mut out = bytes[..start].to_vec();
        out.extend_from_slice(&encoded);
        out.extend_from_slice(&(encoded.len() as u32).to_le_bytes());
        out.extend_from_slice(b"PAR1");
        out
    }

    /// A row group claiming more rows than the footer's total (polars decodes each group by
    /// its own count) is refused naming both; a column chunk at a negative offset is an error
    /// naming the file, not a panic.
    #[test]
    fn footers_whose_counts_disagree_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = written(dir.path(), 40);
        checked(&path, &with_footer(&bytes, |_| {})).unwrap();
        let more = with_footer(&bytes, |m| m.row_groups[0].num_rows = 10_000_000_000);
        let err = checked(&path, &more).unwrap_err().to_string();
        assert!(
            err.contains("its row groups hold 10000000000 rows, its footer states 40"),
            "{err}"
        );
        let negative = with_footer(&bytes, |m| {
            let meta = m.row_groups[0].columns[0].meta_data.as_mut().unwrap();
            meta.dictionary_page_offset = None;
            meta.data_page_offset = -5;
        });
        // polars' footer reader computes the range itself and panics: the guarded read
        // makes that the file's error
        std::fs::write(&path, &negative).unwrap();
        let err = crate::read_table(&path).unwrap_err().to_string();
        assert!(
            err.contains("t.parquet") && err.contains("damaged"),
            "{err}"
        );
    }

    #[test]
    fn rows_past_the_memory_available_are_refused_before_decoding() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = written(dir.path(), 40);
        let metadata =
            polars_parquet::parquet::read::read_metadata(&mut std::io::Cursor::new(&bytes))
                .unwrap();
        // 40 rows of 2 columns: 1,920 bytes decoded
        let err = check_memory(&path, &metadata, Decoded::Whole, 1000)
            .unwrap_err()
            .to_string();
        assert!(err.contains("40 rows of 2 columns"), "{err}");
        check_memory(&path, &metadata, Decoded::Whole, 1920).unwrap();
    }
}
