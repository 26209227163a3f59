//! rpm's SQLite backend (lib/backend/sqlite.c, rpm >= 4.16): one `rpmdb.sqlite` with a
//! `Packages` table (`hnum INTEGER PRIMARY KEY AUTOINCREMENT, blob`) and one table per index
//! (`key, hnum, idx`), in write-ahead-log mode.
//!
//! The file is worked on as rpm would: copied to a temporary directory (with its `-wal`,
//! whose committed transactions opening applies and a checkpoint folds in), opened with
//! rusqlite, rows inserted and deleted with rpm's own statements, then checkpointed and closed
//! as rpm's `sqlite_fini` does (`wal_checkpoint(TRUNCATE)`; see [`close`] on `optimize`).
use std::path::Path;

use rusqlite::{params, Connection, OpenFlags};

use super::{index_entries, RpmdbError, INDEXES};
use crate::header::Header;

/// What [`read`] gets out of a database file.
pub(super) struct Read {
    /// The database with its write-ahead log applied.
    pub db: Vec<u8>,
    /// `Packages` rows in `hnum` order.
    pub blobs: Vec<(u32, Vec<u8>)>,
    /// `sqlite_sequence`'s value for `Packages` (or the largest `hnum`, if larger).
    pub max_instance: u32,
}

fn sql_err<'a>(what: &'static str, path: &'a str) -> impl Fn(rusqlite::Error) -> RpmdbError + 'a {
    move |source| RpmdbError::Sqlite { what, path: path.to_string(), source }
}

fn io_err(what: &'static str) -> impl Fn(std::io::Error) -> RpmdbError {
    move |source| RpmdbError::Io { what, source }
}

/// Opens a copy of the database in `dir`, with the base's file treated as untrusted input:
/// defensive mode (no writes to the schema's internals) and no SQL functions from the schema.
fn open_copy(
    dir: &Path,
    db: &[u8],
    wal: Option<&[u8]>,
    path: &str,
) -> Result<Connection, RpmdbError> {
    let file = dir.join("rpmdb.sqlite");
    std::fs::write(&file, db).map_err(io_err("writing a temporary copy of the rpm database"))?;
    if let Some(wal) = wal {
        std::fs::write(dir.join("rpmdb.sqlite-wal"), wal)
            .map_err(io_err("writing a temporary copy of the rpm database's log"))?;
    }
    let conn = Connection::open_with_flags(
        &file,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql_err("opening", path))?;
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)
        .map_err(sql_err("configuring", path))?;
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)
        .map_err(sql_err("configuring", path))?;
    // rpm never turns foreign keys on (it deletes a package's row before its index rows);
    // the bundled SQLite's default may differ from the system's.
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_FKEY, false)
        .map_err(sql_err("configuring", path))?;
    // A scratch copy, read back whole once closed: nothing is gained by waiting for the disk
    // at each commit (17 `fsync`s, 10 ms, for one build's read and write). `synchronous` only
    // decides when SQLite syncs, not what it writes. Like any statement, the pragma reads the
    // schema first: a file that is not a database fails here.
    conn.pragma_update(None, "synchronous", "OFF")
        .map_err(sql_err("reading the schema of", path))?;
    Ok(conn)
}

/// Folds the log into the database and closes it, as rpm's `sqlite_fini` does, and returns
/// the file's bytes. rpm's `PRAGMA optimize` is left out: what it analyses depends on the
/// SQLite version (the bundled one would add a `sqlite_stat4` table EL9's never writes), and
/// the statistics are only hints; the base's stay, and rpm refreshes them on its next write.
fn close(conn: Connection, dir: &Path, path: &str) -> Result<Vec<u8>, RpmdbError> {
    conn.query_row("PRAGMA wal_checkpoint = TRUNCATE", [], |_| Ok(()))
        .map_err(sql_err("checkpointing", path))?;
    // The layer whites out the base's `-wal` and `-shm` (stale beside a new database). A
    // database left in WAL mode could then only be read by a user who may create them in
    // /var/lib/rpm: `rpm -q` as non-root in the container would fail. In rollback-journal
    // mode a reader needs no side file; rpm switches back to WAL when it next writes as root.
    conn.query_row("PRAGMA journal_mode = DELETE", [], |_| Ok(()))
        .map_err(sql_err("configuring", path))?;
    conn.close().map_err(|(_, e)| sql_err("closing", path)(e))?;
    std::fs::read(dir.join("rpmdb.sqlite")).map_err(io_err("reading back the rpm database"))
}

fn has_table(conn: &Connection, name: &str, path: &str) -> Result<bool, RpmdbError> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(sql_err("reading the schema of", path))
}

/// Reads every header blob, applying the write-ahead log `wal` when the base has one.
pub(super) fn read(db: &[u8], wal: Option<&[u8]>, path: &str) -> Result<Read, RpmdbError> {
    let dir = tempfile::tempdir()
        .map_err(io_err("creating a temporary directory for the rpm database"))?;
    let conn = open_copy(dir.path(), db, wal, path)?;
    let mut blobs = Vec::new();
    let mut max_instance = 0u32;
    if has_table(&conn, "Packages", path)? {
        let mut stmt = conn
            .prepare("SELECT hnum, blob FROM Packages ORDER BY hnum")
            .map_err(sql_err("reading", path))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))
            .map_err(sql_err("reading", path))?;
        for row in rows {
            let (hnum, blob) = row.map_err(sql_err("reading", path))?;
            let Ok(hnum) = u32::try_from(hnum) else { continue };
            blobs.push((hnum, blob));
        }
        drop(stmt);
        if has_table(&conn, "sqlite_sequence", path)? {
            let seq: Option<i64> = conn
                .query_row(
                    "SELECT max(seq) FROM sqlite_sequence WHERE name = 'Packages'",
                    [],
                    |r| r.get(0),
                )
                .map_err(sql_err("reading", path))?;
            max_instance = seq.and_then(|s| u32::try_from(s).ok()).unwrap_or(0);
        }
        max_instance = max_instance.max(blobs.last().map_or(0, |(h, _)| *h));
    }
    let db = close(conn, dir.path(), path)?;
    Ok(Read { db, blobs, max_instance })
}

/// rpm's tables and indexes, created as `init_table` and `init_index` do where the base
/// lacks them (a database written by an older rpm).
fn ensure_schema(conn: &Connection, path: &str) -> Result<(), RpmdbError> {
    let mut sql = String::from("CREATE TABLE IF NOT EXISTS 'Packages' (hnum INTEGER PRIMARY KEY AUTOINCREMENT,blob BLOB NOT NULL);\n");
    for ix in INDEXES {
        if has_table(conn, ix.name, path)? {
            continue;
        }
        let keytype = if ix.string { "TEXT" } else { "BLOB" };
        sql += &format!(
            "CREATE TABLE IF NOT EXISTS '{0}' (key '{keytype}' NOT NULL, hnum INTEGER NOT NULL, idx INTEGER NOT NULL, FOREIGN KEY (hnum) REFERENCES 'Packages'(hnum));\n",
            ix.name
        );
        if ix.string {
            sql +=
                &format!("CREATE INDEX IF NOT EXISTS '{0}_key_idx' ON '{0}'(key ASC);\n", ix.name);
        }
        if ix.array {
            sql += &format!(
                "CREATE INDEX IF NOT EXISTS '{0}_hnum_idx' ON '{0}'(hnum ASC);\n",
                ix.name
            );
        }
    }
    conn.execute_batch(&sql).map_err(sql_err("creating rpm's tables in", path))
}

/// The database `db` without the packages `remove` and with `added` (their expected
/// instance numbers and installed headers), laid out as rpm's sqlite backend writes it:
/// each new package's row, then its keys index by index in `dbiTags` order; the removed
/// packages' rows after (rpm adds an upgrade's new package before erasing the old one).
pub(super) fn write(
    db: &[u8],
    remove: &[u32],
    added: &[(u32, Header)],
    path: &str,
) -> Result<Vec<u8>, RpmdbError> {
    let dir = tempfile::tempdir()
        .map_err(io_err("creating a temporary directory for the rpm database"))?;
    let mut conn = open_copy(dir.path(), db, None, path)?;
    // sqlite_init's settings.
    conn.execute_batch("PRAGMA secure_delete = OFF; PRAGMA case_sensitive_like = ON;")
        .map_err(sql_err("configuring", path))?;
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .map_err(sql_err("configuring", path))?;
    ensure_schema(&conn, path)?;
    let tx = conn.transaction().map_err(sql_err("writing", path))?;
    for (expected, h) in added {
        tx.execute(
            "INSERT OR REPLACE INTO 'Packages' VALUES(?, ?)",
            params![None::<i64>, h.blob()],
        )
        .map_err(sql_err("adding a package to", path))?;
        let hnum = tx.last_insert_rowid();
        if hnum != i64::from(*expected) {
            // The sequence and the rows disagree with what was read: refuse rather than guess.
            return Err(RpmdbError::Sqlite {
                what: "unexpected package instance numbers in",
                path: path.to_string(),
                source: rusqlite::Error::InvalidQuery,
            });
        }
        let entries = index_entries(h, *expected);
        for ix in INDEXES {
            let Some(keys) = entries.get(ix.name) else { continue };
            // rpm binds string keys as text (byte for byte, whatever their encoding) and the
            // others as blobs.
            let sql = if ix.string {
                format!("INSERT INTO '{}' VALUES(CAST(? AS TEXT), ?, ?)", ix.name)
            } else {
                format!("INSERT INTO '{}' VALUES(?, ?, ?)", ix.name)
            };
            let mut stmt =
                tx.prepare_cached(&sql).map_err(sql_err("indexing a package in", path))?;
            for (key, idx) in keys {
                stmt.execute(params![key, hnum, idx])
                    .map_err(sql_err("indexing a package in", path))?;
            }
        }
    }
    for hnum in remove {
        tx.execute("DELETE FROM 'Packages' WHERE hnum=?;", [hnum])
            .map_err(sql_err("removing a package from", path))?;
        for ix in INDEXES {
            tx.execute(&format!("DELETE FROM '{}' WHERE hnum=?", ix.name), [hnum])
                .map_err(sql_err("removing a package from", path))?;
        }
    }
    tx.commit().map_err(sql_err("writing", path))?;
    close(conn, dir.path(), path)
}
