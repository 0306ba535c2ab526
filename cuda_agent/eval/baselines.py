"""Eager and torch.compile baselines: timed like candidates, in a judge of their own, cached.

The cache key is (task hash, device name, torch version, dtypes, mode, timing method): the same
task on the same GPU type is timed once, not once per candidate. The timing method (eval.timing:
warm-up, batch length, batch counts, calls per batch and how they are rounded) is in it because it
moves the figure: a baseline is only ever compared with a candidate timed the same way; so is
FIGURE_RULE, bumped whenever the harness changes how a batch's figure is made. Only the parent
writes the cache file (the jailed processes cannot write it), atomically (a temp file, then os.replace),
under a lock file, so concurrent evaluators never read half a file nor lose each other's entries.

The cache is not trusted on its word: every entry carries an HMAC-SHA256 tag over the canonical
JSON of its key, its key fields and its content, made with a secret key the harness keeps in
`<cache dir>/.keys/baselines.key` (mode 0600, folder 0700, 32 random bytes made on first use).
An entry with no tag, a wrong tag, or key fields that are not the lookup's is ignored (`get`
returns None and says so), so the caller times the baseline again and overwrites it.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from cuda_agent.eval.timing import TimingConfig
from cuda_agent.eval.verdict import Timing
from cuda_agent.kernels.objects import write_atomic

# how a batch's figure is made, in the key (2: the slower of the parent's clock and the judge's events;
# 1 took the events wherever they sat within 5% of the parent's)
FIGURE_RULE = 2

KEY_DIR = ".keys"
KEY_FILE = "baselines.key"
KEY_BYTES = 32
REJECTED_NOTE = "baseline cache entry failed its check; timed again"
TIMED_NOTE = "baselines not in the cache yet: timed now, cached for the next evaluations"
CACHE_NOTES = (REJECTED_NOTE, TIMED_NOTE)  # what the cache had, said in a verdict's notes: never an error
FIELDS = ("task_hash", "device_name", "torch_version", "dtypes", "mode", "timing")
_RESERVED = ("fields", "tag")  # what the cache adds to an entry on disk


def default_cache_dir() -> Path:
    return Path(os.environ.get("CUDA_AGENT_CACHE", Path.home() / ".cache" / "cuda-agent"))


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


class BaselineCache:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.key_path = self.path.parent / KEY_DIR / KEY_FILE
        self.lock_path = self.path.parent / "locks" / (self.path.name + ".lock")
        self.rejected: list[str] = []  # keys whose entries failed their check, in this object's life

    # -- keys ------------------------------------------------------------------------------
    @staticmethod
    def key(
        task_hash: str, device_name: str, torch_version: str, dtypes: list[str], mode: str, timing: TimingConfig
    ) -> str:
        method = ",".join([f"figure_rule={FIGURE_RULE}", *(f"{k}={v}" for k, v in sorted(timing.model_dump().items()))])
        return "|".join([task_hash, device_name, torch_version, ",".join(dtypes), mode, method])

    @staticmethod
    def fields(key: str) -> dict[str, str]:
        """The lookup's fields back from a key (a GPU name may hold '|', the others do not)."""
        task_hash, _, rest = key.partition("|")
        parts = rest.rsplit("|", 4)
        if len(parts) != 5:
            raise ValueError(f"not a baseline cache key: {key!r}")
        return dict(zip(FIELDS, [task_hash, *parts]))

    # -- reading ---------------------------------------------------------------------------
    def get(self, key: str, notes: list[str] | None = None) -> dict | None:
        """The entry stored under `key` if its tag and key fields check out, else None, which the
        evaluator times now and stores. `notes` (a verdict's) say so, each once: TIMED_NOTE when there
        is no entry, REJECTED_NOTE when one is there but fails its check (its key also goes to
        `self.rejected`)."""
        record = self._load().get(key)
        if record is None:
            _note(notes, TIMED_NOTE)
            return None
        entry = self._checked(key, record)
        if entry is None:
            self.rejected.append(key)
            _note(notes, REJECTED_NOTE)
        return entry

    def _checked(self, key: str, record) -> dict | None:
        if not isinstance(record, dict) or not isinstance(record.get("tag"), str):
            return None
        try:
            want = self.fields(key)
        except ValueError:
            return None
        if record.get("fields") != want:
            return None
        secret = self._read_secret()
        if secret is None:
            return None
        entry = {k: v for k, v in record.items() if k not in _RESERVED}
        if not hmac.compare_digest(record["tag"], self._tag(secret, key, want, entry)):
            return None
        return entry

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    # -- writing ---------------------------------------------------------------------------
    def put(self, key: str, entry: dict) -> None:
        """Store `entry` under `key` with its tag: read, change and replace the file under the
        lock, so writers in other processes keep their entries."""
        entry = json.loads(json.dumps(entry))  # what the file will give back (tuples -> lists)
        if not isinstance(entry, dict) or any(k in entry for k in _RESERVED):
            raise ValueError(f"a baseline cache entry is a dict without the keys {_RESERVED}")
        want = self.fields(key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            secret = self._secret()
            data = self._load()
            data[key] = {**entry, "fields": want, "tag": self._tag(secret, key, want, entry)}
            write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True), prefix=".baselines-", sync=True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer at a time across processes (fcntl, as eval/device_lock.py does for GPUs)."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- the secret ------------------------------------------------------------------------
    @staticmethod
    def _tag(secret: bytes, key: str, fields: dict, entry: dict) -> str:
        msg = _canonical({"key": key, "fields": fields, "entry": entry})
        return hmac.new(secret, msg, hashlib.sha256).hexdigest()

    def _read_secret(self) -> bytes | None:
        """The key if its file is ours, private (0600 or less, in a 0700 folder of ours), a
        plain file and the right length; None otherwise (then no entry checks out)."""
        folder = self.key_path.parent
        try:
            st = os.lstat(folder)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                return None
            fd = os.open(self.key_path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                return None
            secret = f.read(KEY_BYTES + 1)
        return secret if len(secret) == KEY_BYTES else None

    def _secret(self) -> bytes:
        """The key, made now if there is none or the one there cannot be trusted (a new key
        makes every older entry fail its check, so they are timed again). Called under the lock."""
        secret = self._read_secret()
        if secret is not None:
            return secret
        folder = self.key_path.parent
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            folder.unlink()
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
        if st.st_uid != os.getuid():
            raise PermissionError(
                f"{folder} belongs to another user: the baseline cache cannot keep its key there "
                "(set CUDA_AGENT_CACHE to a folder of your own)"
            )
        os.chmod(folder, 0o700)
        secret = os.urandom(KEY_BYTES)
        write_atomic(self.key_path, secret, prefix=".key-", sync=True)  # mkstemp: 0600
        return secret


def _note(notes: list[str] | None, note: str) -> None:
    if notes is not None and note not in notes:
        notes.append(note)


def timed_now(notes: list[str]) -> bool:
    """Whether a verdict's cached baselines were timed in its own evaluation (then stored for later ones)."""
    return any(note in notes for note in CACHE_NOTES)


def timing_from(entry: dict | None) -> Timing | None:
    return Timing(**entry["timing"]) if entry and entry.get("timing") else None
