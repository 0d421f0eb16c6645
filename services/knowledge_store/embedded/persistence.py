"""The derived indexes of a tenant on disk, next to its SQLite database, so an open loads them
instead of rebuilding them.

    <data_dir>/tenants/<tenant>/derived/
        manifest.json        what the files hold and the SQLite commit they reflect (below)
        vectors.<n>.faiss    the FAISS index (`faiss.write_index`)
        keywords.<n>.npz     the BM25 index as flat arrays (KeywordIndex.arrays)

The manifest names the files with their sizes and CRC-32s, the stamp (the database's id and
the seq of `index_log` the indexes reflect, storage/index_log.py), the dimension, the index
configuration, the BM25 weights and both formats. An open trusts the files only when all of
that matches and the checksums verify; anything else (missing, truncated, corrupt, another
database, another configuration) raises `Unusable` and the tenant is rebuilt from SQLite, the
system of record, with a log line saying why (tenants.py). A stamp *newer* than SQLite's
raises `LostCommits`: SQLite lost commits the files had seen (a damaged write-ahead log), which
the store reports as such before it rebuilds. A stamp
older than SQLite's is caught up by replaying the log (tenants.py), unless the log no longer
holds those rows.

Writes are atomic: each file is written under a temporary name, fsynced and renamed; the
manifest goes last, so a crash (kill -9, power loss) at any point leaves either the previous
complete set or the new one; files no manifest names are removed by the next save.
Files up to MAP_ABOVE_BYTES are read and checked before use. Bigger ones are memory-mapped
(read-only) and their checksums verified in the background right after the open (a mismatch
drops the tenant and its manifest, so the next access rebuilds it, with a log line): a 1M-chunk
tenant serves its first query without reading 2 GB first. A mapped FAISS index becomes an
owned copy at its first write (vector_index.py); the mapped BM25 postings are never written
(new postings go to the delta, keyword_index.py).
"""
from __future__ import annotations

import json
import logging
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from services.knowledge_store.embedded.keyword_index import KEYWORD_FORMAT, KeywordIndex
from services.knowledge_store.embedded.storage.index_log import Stamp
from services.knowledge_store.embedded.vector_index import IndexConfig, VectorIndex

log = logging.getLogger(__name__)

FORMAT = 1
LEGACY_HNSW_EF_CONSTRUCTION = 80       # what HNSW files saved before the setting existed were built with
DIR_NAME = "derived"
MANIFEST = "manifest.json"
_CHUNK = 1 << 24
MAP_ABOVE_BYTES = 64 * 2**20    # bigger files are memory-mapped and checked in the background


class Unusable(Exception):
    """The persisted indexes cannot be trusted (the message says why)."""


class LostCommits(Unusable):
    """The saved files reflect commits SQLite no longer holds (a damaged or lost write-ahead
    log): not a stale cache but lost data, which the store reports (tenants.py)."""

    def __init__(self, saved_seq: int, database_seq: int, saved_vectors: int) -> None:
        super().__init__(f"the files reflect log seq {saved_seq}, newer than the database's {database_seq}")
        self.saved_seq = saved_seq
        self.database_seq = database_seq
        self.saved_vectors = saved_vectors


@dataclass(frozen=True, slots=True)
class Loaded:
    index: VectorIndex
    keywords: KeywordIndex
    seq: int                      # the log seq they reflect
    unverified: tuple[tuple[Path, int], ...] = ()     # memory-mapped files whose CRC `verify` checks


def crc32_of(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        _fsync_file(path)
    except OSError:               # some file systems refuse a directory fsync; the rename stands
        pass


def _structure(config: IndexConfig) -> str:
    """The configuration the saved structure depends on: all of it but HNSW's efSearch, which
    only applies at search time (so changing it never forces a rebuild)."""
    return replace(config, hnsw_ef_search=0).to_json()


def _structure_mismatch(saved: object, config: IndexConfig, kind: str) -> bool:
    """Whether a manifest's `index_config` (`saved`) describes another structure than `config`
    would build. Files saved before `hnsw_ef_construction` was a setting were built with
    efConstruction 80; a saved flat or IVF index does not depend on the HNSW parameters (an
    `auto` tenant below the threshold keeps its files when they change)."""
    try:
        have = json.loads(saved) if isinstance(saved, str) else None
    except ValueError:
        have = None
    if not isinstance(have, dict):
        return True
    want = json.loads(_structure(config))
    have.setdefault("hnsw_ef_construction", LEGACY_HNSW_EF_CONSTRUCTION)
    if kind != "hnsw":
        for key in ("hnsw_m", "hnsw_ef_construction"):
            have.pop(key, None)
            want.pop(key, None)
    return have != want


def read_npz(path: Path, *, mapped: bool = False) -> dict[str, np.ndarray]:
    """The arrays of an uncompressed `.npz` (as `np.savez` writes), each read with one
    `np.fromfile` from where it lies in the file (or, `mapped`, memory-mapped there, read-only):
    no zip-member copies (the file's checksum is verified separately). ValueError when the
    file is not laid out that way."""
    out: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as archive, open(path, "rb") as f:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"{path}: member {info.filename} is not a stored .npy")
            f.seek(info.header_offset)
            local = f.read(30)
            if len(local) != 30 or local[:4] != b"PK\x03\x04":
                raise ValueError(f"{path}: bad local header of {info.filename}")
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            f.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            if dtype.hasobject or fortran:
                raise ValueError(f"{path}: member {info.filename} is not a plain array")
            count = int(np.prod(shape, dtype=np.int64))
            if mapped and count:
                if f.tell() + count * dtype.itemsize > os.fstat(f.fileno()).st_size:
                    raise ValueError(f"{path}: member {info.filename} is truncated")
                array = np.memmap(path, dtype=dtype, mode="r", offset=f.tell(), shape=(count,))
            else:
                array = np.fromfile(f, dtype=dtype, count=count)
            if len(array) != count:
                raise ValueError(f"{path}: member {info.filename} is truncated")
            out[info.filename[:-4]] = array.reshape(shape)
    return out


def exists(tenant_dir: Path) -> bool:
    return (tenant_dir / DIR_NAME / MANIFEST).is_file()


def load(tenant_dir: Path, *, stamp: Stamp, dimension: int, config: IndexConfig,
         weights: tuple[float, float], auto_threshold: int, map_above: int | None = None) -> Loaded:
    """The persisted indexes of the tenant in `tenant_dir`, checked against what SQLite holds
    (`stamp`) and the configuration; `Unusable` naming the reason when they do not fit.

    Files of more than `map_above` bytes are memory-mapped rather than read (FAISS's flat
    codes and graph with IO_FLAG_MMAP_IFC, the BM25 postings as `np.memmap`), and their
    checksums are left to `verify` (the caller runs it in the background), so a big tenant
    opens in the time its manifest and small arrays take; pages come in as searches touch them."""
    directory = tenant_dir / DIR_NAME
    map_above = MAP_ABOVE_BYTES if map_above is None else map_above
    try:
        manifest = json.loads((directory / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError) as err:
        raise Unusable(f"unreadable manifest {directory / MANIFEST}: {err}") from err
    try:
        expected = {"format": FORMAT, "keyword_format": KEYWORD_FORMAT, "database_id": stamp.database_id,
                    "dimension": dimension, "bm25_weights": list(weights)}
        for key, want in expected.items():
            if manifest.get(key) != want:
                raise Unusable(f"{key} is {manifest.get(key)!r} in {directory / MANIFEST}, expected {want!r}")
        if _structure_mismatch(manifest.get("index_config"), config, str(manifest["vector_state"]["kind"])):
            raise Unusable(f"index_config is {manifest.get('index_config')!r} in {directory / MANIFEST}, "
                           f"expected {_structure(config)!r}")
        seq = int(manifest["seq"])
        if seq > stamp.seq:
            raise LostCommits(seq, stamp.seq, int(manifest.get("vectors", 0)))
        files = manifest["files"]
        deferred: list[str] = []
        for role in ("vectors", "keywords"):
            name = files[role]["name"]
            path = directory / name
            if "/" in name or not path.is_file():
                raise Unusable(f"{role} file {path} is missing")
            if path.stat().st_size != files[role]["size"]:
                raise Unusable(f"{role} file {path} has {path.stat().st_size} bytes, the manifest says "
                               f"{files[role]['size']}")
            if files[role]["size"] > map_above:
                deferred.append(role)
            elif crc32_of(path) != files[role]["crc32"]:
                raise Unusable(f"{role} file {path} fails its checksum")
        state = manifest["vector_state"]
        index = VectorIndex.restore(dimension, config, str(directory / files["vectors"]["name"]),
                                    kind=state["kind"], tombstones=state["tombstones"],
                                    trained_on=state["trained_on"], auto_threshold=auto_threshold,
                                    mapped="vectors" in deferred, depth=state.get("depth"))
        keywords = KeywordIndex.from_arrays(read_npz(directory / files["keywords"]["name"],
                                                     mapped="keywords" in deferred))
        if keywords.weights != tuple(float(w) for w in weights):
            raise Unusable(f"the keyword index was built with weights {keywords.weights}")
    except Unusable:
        raise
    except (KeyError, TypeError, ValueError, OSError, RuntimeError, zipfile.BadZipFile) as err:
        raise Unusable(f"unreadable files in {directory}: {type(err).__name__}: {err}") from err
    return Loaded(index=index, keywords=keywords, seq=seq,
                  unverified=tuple((directory / files[r]["name"], int(files[r]["crc32"])) for r in deferred))


def verify(unverified: tuple[tuple[Path, int], ...]) -> str:
    """Check the checksums `load` left for later: "" when they match, else what failed."""
    for path, crc in unverified:
        try:
            if crc32_of(path) != crc:
                return f"{path} fails its checksum"
        except OSError as err:
            return f"{path} cannot be read: {err}"
    return ""


def discard(tenant_dir: Path) -> None:
    """Drop the saved files' manifest, so the next open rebuilds from SQLite."""
    (tenant_dir / DIR_NAME / MANIFEST).unlink(missing_ok=True)


def save(tenant_dir: Path, *, stamp: Stamp, index: VectorIndex, keywords: KeywordIndex,
         weights: tuple[float, float]) -> int:
    """Write both indexes, stamped `stamp`, atomically (module docstring). The caller keeps
    writes out meanwhile (the tenant's write lock) and searches may go on. Returns bytes written."""
    directory = tenant_dir / DIR_NAME
    directory.mkdir(exist_ok=True)
    token = f"{stamp.seq}-{os.getpid()}-{os.urandom(3).hex()}"
    names = {"vectors": f"vectors.{token}.faiss", "keywords": f"keywords.{token}.npz"}
    files: dict[str, dict] = {}
    try:
        tmp = directory / (names["vectors"] + ".tmp")
        state = index.save(str(tmp))
        _fsync_file(tmp)
        files["vectors"] = {"name": names["vectors"], "size": tmp.stat().st_size, "crc32": crc32_of(tmp)}
        tmp.rename(directory / names["vectors"])
        tmp = directory / (names["keywords"] + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **keywords.arrays())
            f.flush()
            os.fsync(f.fileno())
        files["keywords"] = {"name": names["keywords"], "size": tmp.stat().st_size, "crc32": crc32_of(tmp)}
        tmp.rename(directory / names["keywords"])
        manifest = {"format": FORMAT, "keyword_format": KEYWORD_FORMAT, "database_id": stamp.database_id,
                    "seq": stamp.seq, "dimension": index.dimension, "index_config": _structure(index.config),
                    "bm25_weights": list(weights), "vector_state": state, "files": files,
                    "vectors": index.ntotal, "keyword_entries": keywords.ntotal}
        tmp = directory / (MANIFEST + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(manifest, f)
            f.flush()
            os.fsync(f.fileno())
        tmp.rename(directory / MANIFEST)
        _fsync_dir(directory)
    except BaseException:
        for name in names.values():
            for path in (directory / name, directory / (name + ".tmp")):
                path.unlink(missing_ok=True)
        raise
    keep = {MANIFEST, *names.values()}
    for path in directory.iterdir():
        if path.name not in keep:
            path.unlink(missing_ok=True)
    return sum(f["size"] for f in files.values())
