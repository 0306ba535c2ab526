"""What a version holds, as one hash: the bytes of every file of model_new.py and kernels/ at a
commit, read from git's objects with each object checked against its name. The verdict ledger
keys evaluations by this hash, so a result is found by what was evaluated, never by a commit's
message or a ref.

Objects are checked because a shell that reached the repository could plant them (a run of an
older release kept it inside the workspace; `--no-sandbox` runs the shell unjailed): git never
rewrites an object it already has, so a loose object planted under the name of content about to
be submitted would otherwise be read back in its place. No git calls here: `read` runs `git cat-file` for us.
"""

from __future__ import annotations

import hashlib
from typing import Callable

# what a version is: the candidate; the rest of the tree is the task's (results/final.py exports these)
VERSION_PATHS = ("model_new.py", "kernels")
MAX_OBJECT_BYTES = 64 << 20  # a bigger file is no kernel source: its version has no content hash
TREE, GITLINK = b"40000", b"160000"

# object name -> (type, body); None: missing, too big, or its body does not hash to its name
Objects = dict[str, "tuple[str, bytes] | None"]
Reader = Callable[[list[str]], Objects]


def version_digest(files: list[tuple[bytes, bytes, bytes]]) -> str:
    """sha256 over (path, mode, bytes) of every file, in path order; paths and sizes delimit the bytes."""
    h = hashlib.sha256()
    for path, mode, body in sorted(files):
        h.update(b"%s\0%s\0%d\0" % (path, mode, len(body)))
        h.update(body)
    return h.hexdigest()


def checked(name: str, kind: str, body: bytes) -> bool:
    """Whether `body` is the object `name` names (sha1 repositories, and sha256 ones)."""
    algo = "sha1" if len(name) == 40 else "sha256"
    return hashlib.new(algo, b"%s %d\0" % (kind.encode(), len(body)) + body).hexdigest() == name


def tree_entries(body: bytes, name_len: int) -> list[tuple[bytes, bytes, str]]:
    """A raw tree object -> (mode, name, object name) per entry; ValueError when it is not one."""
    out, i, raw = [], 0, name_len // 2
    while i < len(body):
        space, nul = body.index(b" ", i), body.index(b"\0", i)
        if not space < nul or nul + 1 + raw > len(body):
            raise ValueError("not a tree object")
        out.append((body[i:space], body[space + 1 : nul], body[nul + 1 : nul + 1 + raw].hex()))
        i = nul + 1 + raw
    return out


def content_digests(read: Reader, commits: list[str]) -> dict[str, str | None]:
    """Each commit's version_digest; None for one whose objects are missing, too big or not what
    their names say (not a result). One `read` per level of the trees, for all commits at once."""
    failed: set[str] = set()
    files: dict[str, list[tuple[bytes, bytes, bytes]]] = {c: [] for c in commits}
    frontier: list[tuple[str, bytes, bytes, str]] = []  # (commit, path, mode, object)
    objects = read(list(dict.fromkeys(commits)))
    roots: dict[str, str] = {}
    for c in commits:
        obj = objects.get(c)
        first = obj[1].split(b"\n", 1)[0] if obj and obj[0] == "commit" else b""
        if not first.startswith(b"tree "):
            failed.add(c)
        else:
            roots[c] = first[5:].decode("ascii", "replace")
    trees = read(list(dict.fromkeys(roots.values())))
    for c, tree in roots.items():
        obj = trees.get(tree)
        try:
            entries = tree_entries(obj[1], len(tree)) if obj and obj[0] == "tree" else None
        except ValueError:
            entries = None
        if entries is None:
            failed.add(c)
            continue
        wanted = {p.encode() for p in VERSION_PATHS}
        frontier += [(c, name, mode, sha) for mode, name, sha in entries if name in wanted]
    while frontier:
        wanted_now = (sha for c, _, mode, sha in frontier if mode != GITLINK and c not in failed)
        objects = read(list(dict.fromkeys(wanted_now)))
        later = []
        for c, path, mode, sha in frontier:
            if c in failed:
                continue
            if mode == GITLINK:  # a submodule's commit: its name is all a version holds of it
                files[c].append((path, mode, sha.encode()))
                continue
            obj = objects.get(sha)
            try:
                if obj is None or obj[0] != ("tree" if mode == TREE else "blob"):
                    raise ValueError(sha)
                if mode == TREE:
                    later += [(c, path + b"/" + name, m, s) for m, name, s in tree_entries(obj[1], len(sha))]
                else:
                    files[c].append((path, mode, obj[1]))
            except ValueError:
                failed.add(c)
        frontier = later
    return {c: None if c in failed else version_digest(files[c]) for c in commits}


def parse_batch(out: bytes, names: list[str]) -> Objects:
    """`git cat-file --batch` output for `names` -> Objects, each checked against its name."""
    found: Objects = {}
    i = 0
    for name in names:
        end = out.index(b"\n", i)
        head = out[i:end].split()
        i = end + 1
        if len(head) != 3:  # "<name> missing" (or ambiguous)
            found[name] = None
            continue
        kind, size = head[1].decode(), int(head[2])
        body, i = out[i : i + size], i + size + 1
        found[name] = (kind, body) if head[0].decode() == name and checked(name, kind, body) else None
    return found
