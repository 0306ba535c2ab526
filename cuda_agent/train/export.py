"""Runs -> training data, read from trajectories only (records.py, trajectory.py; no agent loop): SFT
chat JSONL, RFT (the best run per task), and verl's parquet of tasks (verl_data.py).
- A run's messages are the history as the model was shown it, in order, rebuilt by the function
  `--resume` continues from (agent/history.py): system, task, assistant turns with their tool calls,
  tool results, the format-error feedback sent after a turn the loop could not act on, a person's
  messages, a resume's notes. Trainers re-tokenise with their own chat template (`train sft` renders
  a text-protocol run, metadata `protocol`, as its client did: sft_data.py).
- Turns the model did not write as they ran are never presented as its own: a turn a person edited,
  or one a script wrote, gets `"weight": 0` (OpenAI's fine-tuning convention for "do not train on
  this assistant message"); such turns and a person's messages are listed in the run's metadata, and
  `--drop-marked` leaves those runs out instead.
- Context trimming changed what the model saw: a run is written as one record per stretch between
  trims (metadata `segment`, `segments`). A record holds the history as the model's last request in
  its stretch held it (earlier trims replayed: the shortened observations, sources and replies as
  the model was sent them) and trains only the turns written in that stretch; earlier turns are
  context with `"weight": 0` (they may read shortened: never trained so). So every trained turn has
  exactly the context it was written from. The trimmed steps are listed in the metadata
  (`--drop-trimmed` leaves those runs out).
- sft/rft leave out a run the model never answered in (zero model turns): nothing to learn from; and,
  by default, a run with turns an MCP client made (`cuda-agent mcp`: the header's or a resume's model
  is `mcp:<client>/<version>`), which are the client's tool calls without its model text.
  `include_external` keeps those runs as demonstrations: each such turn is marked `"external": true`,
  holds only its tool calls (`content` null) and is trained as that. verl takes every run as a task.
- Every string is redacted again on the way out (secrets.Redactor), though the trajectory was
  written redacted.
- A run's reward is the harness's verdict ledger's (`<run>/ledger.jsonl`, workspace/ledger.py):
  the milestone reward of the best correct version the run found, -1 when none. The trajectory is
  only checked against it: a closing record or an evaluation record that says otherwise (a
  `best_reward` edited by hand) gets the run refused with one line naming it and what disagrees,
  and so does a run folder without a ledger (made before the harness kept one: re-run it). sft
  and rft check; verl takes runs as tasks only, whatever they scored.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cuda_agent.agent.history import rebuild
from cuda_agent.records import (
    EXTERNAL_MODEL_PREFIX,
    Closing,
    FormatErrorRecord,
    Header,
    ModelTurn,
    Resume,
    ToolResultRecord,
    Trim,
    UserMessage,
)
from cuda_agent.run_folder import LEDGER, TRAJECTORY, RunFolder
from cuda_agent.secrets import Redactor
from cuda_agent.train.run_episode import UNKNOWN, Episode
from cuda_agent.trajectory import read_trajectory
from cuda_agent.untrusted_files import UnreadableFile
from cuda_agent.workspace.ledger import LedgerError

NO_LEDGER = (
    f"no verdict ledger ({LEDGER}): the run was made before the harness kept one; re-run the task "
    "(or `optimize --resume` it and verify again) to export it"
)

Format = Literal["sft", "rft", "verl"]
NO_MODEL_TURN = "no model turn (the run ended before the model answered)"
EXTERNAL = (
    "driven by an MCP client (cuda-agent mcp): its turns are the client's calls, with no model text "
    "(--include-external keeps them)"
)


@dataclass
class ExportReport:
    runs: int = 0
    written: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> runs
    refused: list[str] = field(default_factory=list)  # "<run>: what disagrees with its verdict ledger"
    marked_turns: int = 0
    external_turns: int = 0  # turns an MCP client made, kept as demonstrations (include_external)

    def lines(self) -> list[str]:
        out = [f"read {self.runs} run(s), wrote {self.written} record(s)"]
        out += [f"left out {n}: {why}" for why, n in sorted(self.skipped.items())]
        out += [f"refused {line}" for line in self.refused]
        if self.marked_turns:
            out.append(f"{self.marked_turns} assistant turn(s) written by a person or a script kept with weight 0")
        if self.external_turns:
            out.append(
                f"{self.external_turns} assistant turn(s) an MCP client made kept as demonstrations: "
                'its tool calls only, marked "external": true'
            )
        return out

    def why_empty(self) -> str:
        """Why nothing was written, in one line."""
        if not self.runs:
            return f"no run folder (a folder with {TRAJECTORY}) under the paths given"
        left = "; ".join(
            [f"{n} {why}" for why, n in sorted(self.skipped.items())] + [f"refused {line}" for line in self.refused]
        )
        return f"{self.runs} run(s) read, every one left out: {left}"


def find_runs(paths: list[Path]) -> list[Path]:
    """Run folders under the given paths (a run folder, a batch folder, a folder of runs)."""
    found: set[Path] = set()
    for p in paths:
        p = Path(p)
        if RunFolder(p).trajectory.is_file():
            found.add(p.resolve())
        elif p.is_dir():
            found.update(run.path.resolve() for run in RunFolder.all_under(p))
        else:
            raise FileNotFoundError(f"{p} is neither a run folder nor a folder of runs")
    return sorted(found)


def read_episode(run_dir: Path) -> Episode | None:
    """The run's history as the model was shown it (module doc); None when it has no header."""
    records = read_trajectory(RunFolder(run_dir).trajectory)
    if not records or not isinstance(records[0], Header):
        return None
    header = records[0]
    state = rebuild(records)
    turns = [r for r in records if isinstance(r, ModelTurn)]
    marked = [r.edited_by_person or r.injected for r in turns]
    writers = _turn_writers(records)
    external = [w.startswith(EXTERNAL_MODEL_PREFIX) for w in writers]
    closing = next((r for r in reversed(records) if isinstance(r, Closing)), None)
    ep = Episode(
        path=run_dir,
        header=header,
        messages=_marked(state.messages, state.turn_messages, marked, external),
        reward=-1 if closing is None or closing.best_reward is None else closing.best_reward,
        steps=max((r.step for r in turns), default=0),
        stop_reason=closing.stop_reason if closing else None,
        model_turns=len(turns),
        protocol=_protocol(header, [r for r in records if isinstance(r, Resume)]),
        edited_steps=[r.step for r in turns if r.edited_by_person],
        scripted_steps=[r.step for r in turns if r.injected and not r.edited_by_person],
        person_messages=[r.step for r in records if isinstance(r, UserMessage) and r.injected],
        trimmed_steps=[r.step for r in records if isinstance(r, Trim)],
        format_error_steps=sorted(
            {
                r.step
                for r in records
                if isinstance(r, FormatErrorRecord) or isinstance(r, ToolResultRecord) and r.format_error
            }
        ),
        external_steps=[r.step for r, e in zip(turns, external) if e],
        external_clients=sorted({w for w, e in zip(writers, external) if e}),
    )
    ep.reward, ep.disagrees = ledger_reward(run_dir, records, closing)
    first = 0  # the first turn of the stretch
    for history, upto in state.before_trims + [(ep.messages, len(turns))]:
        if not all(marked[first:upto]):  # a stretch with a turn the model wrote: a record training it
            # an earlier stretch's turn (trained there), or not the model's: weight 0
            untrained = [t < first or marked[t] for t in range(upto)]
            ep.records.append(_marked(history, state.turn_messages[:upto], untrained, external))
        first = upto
    return ep


def ledger_reward(run_dir: Path, records: list, closing: Closing | None) -> tuple[int, str | None]:
    """The run's reward as its verdict ledger says (-1: no correct version), and what in the
    trajectory disagrees with the ledger (None: nothing). The best is the ledger's best entry whose
    content the workspace's history holds (History.best), as the run's closing record took it."""
    import git

    from cuda_agent.workspace.history import History
    from cuda_agent.workspace.paths import WorkspaceError

    try:
        run = RunFolder(run_dir)
        history = History.open(run.workspace)
        entries = history.entries() if run.ledger.exists() or run.ledger.is_symlink() else None
        best = history.best() if entries is not None else None
    except (WorkspaceError, git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError):
        return -1, "its workspace/ is missing or not a repository: the ledger's versions cannot be found"
    except LedgerError as e:
        return -1, str(e)
    if entries is None:
        return -1, NO_LEDGER
    reward = best.reward if best is not None else -1
    said = (closing.best_reward, closing.best_version, closing.best_commit) if closing else None
    kept = (best.reward, best.version, best.sha) if best is not None else (None, None, None)
    if said is not None and said != kept:
        return reward, (
            f"its closing record says best_reward {said[0]} (version {said[1]}), the ledger's best is "
            + (f"version {best.version} with reward {best.reward}" if best else "none (reward -1)")
        )
    by_version = {e.version: e for e in entries}
    for r in records:
        if r.type == "evaluation" and r.version is not None:
            e = by_version.get(r.version)
            if e is None or (e.status, e.reward, e.commit) != (r.status, r.reward, r.commit):
                held = f"{e.status}, reward {e.reward}" if e else "no such evaluation"
                return reward, (
                    f"its evaluation record of version {r.version} says {r.status}, "
                    f"reward {r.reward}; the ledger: {held}"
                )
    return reward, None


def _marked(history: list[dict], turn_messages: list[int], untrained: list[bool], external: list[bool]) -> list[dict]:
    """A copy of history, each turn's message (turn_messages: its index, as rebuild puts them) with
    `"weight": 0` where untrained and `"external": true` where an MCP client made it."""
    out = list(history)
    for i, zero, by_client in zip(turn_messages, untrained, external):
        if zero:
            out[i] = {**out[i], "weight": 0}
        if by_client:
            out[i] = {**out[i], "external": True}
    return out


def _turn_writers(records: list) -> list[str]:
    """Who answered each model turn, in order: the header's model, then each resume's (an optimize run
    an MCP client resumed, or the reverse, has turns of both; a resume that did not say keeps the last)."""
    writer, writers = "", []
    for r in records:
        if isinstance(r, Header) or isinstance(r, Resume) and r.model:
            writer = r.model
        elif isinstance(r, ModelTurn):
            writers.append(writer)
    return writers


def _protocol(header: Header, resumes: list[Resume]) -> str:
    """The header's protocol; "mixed" when a resume continued in another; "unknown" when not recorded."""
    found = [header.protocol] + [r.protocol for r in resumes]
    if None in found:
        return UNKNOWN
    return found[0] if len(set(found)) == 1 else "mixed"


def export(
    paths: list[Path],
    fmt: Format,
    out: Path,
    *,
    min_reward: int | None = None,
    drop_marked: bool = False,
    drop_trimmed: bool = False,
    include_unfinished: bool = False,
    include_external: bool = False,
) -> ExportReport:
    report = ExportReport()
    episodes: list[Episode] = []
    for run in find_runs(paths):
        report.runs += 1
        try:
            ep = read_episode(run)
        except (ValueError, UnreadableFile) as e:  # UnreadableFile: a symlink or a FIFO in its place, never read
            report.skipped[f"unreadable trajectory ({str(e).splitlines()[0][:80]})"] += 1
            continue
        if ep is None:
            report.skipped["no header record"] += 1
        elif fmt != "verl" and ep.disagrees is not None:
            report.refused.append(f"{run}: {ep.disagrees}")
        elif ep.stop_reason is None and not include_unfinished:
            report.skipped["unfinished (no closing record; resume it or pass --include-unfinished)"] += 1
        elif fmt != "verl" and not ep.model_turns:
            report.skipped[NO_MODEL_TURN] += 1
        elif fmt != "verl" and ep.external_steps and not include_external:
            report.skipped[EXTERNAL] += 1
        elif fmt != "verl" and min_reward is not None and ep.reward < min_reward:
            report.skipped[f"reward below {min_reward}"] += 1
        elif fmt != "verl" and drop_marked and ep.marked:
            report.skipped["turns written by a person or a script (--drop-marked)"] += 1
        elif fmt != "verl" and drop_trimmed and ep.trimmed_steps:
            report.skipped["context was trimmed (--drop-trimmed)"] += 1
        elif fmt != "verl" and not ep.records:
            report.skipped["no turn written by the model (scripted or edited throughout)"] += 1
        else:
            episodes.append(ep)
    if fmt == "rft":
        episodes = _best_per_task(episodes, report)
    if not episodes:  # nothing to write: no file (an empty one would pass for an export)
        return report
    out.parent.mkdir(parents=True, exist_ok=True)
    redact = Redactor()
    if fmt == "verl":
        from cuda_agent.train.verl_data import write_verl

        report.written = write_verl(episodes, out, redact)
    else:
        with open(out, "w", encoding="utf-8") as f:
            for ep in episodes:
                report.marked_turns += len(ep.edited_steps) + len(ep.scripted_steps)
                report.external_turns += len(ep.external_steps)
                for k, messages in enumerate(ep.records):
                    row = {
                        "messages": messages,
                        "tools": ep.header.tools,
                        "metadata": {**ep.metadata(), "segment": k, "segments": len(ep.records)},
                    }
                    f.write(json.dumps(redact(row), ensure_ascii=False) + "\n")
                    report.written += 1
    return report


def _best_per_task(episodes: list[Episode], report: ExportReport) -> list[Episode]:
    """RFT: per task (by content hash), the run with the highest reward; ties go to fewer steps."""
    best: dict[str, Episode] = {}
    for ep in episodes:
        cur = best.get(ep.header.task.hash)
        if cur is None or (ep.reward, -ep.steps) > (cur.reward, -cur.steps):
            best[ep.header.task.hash] = ep
    if len(best) < len(episodes):
        report.skipped["not the best run of its task"] += len(episodes) - len(best)
    return list(best.values())
