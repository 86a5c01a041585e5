"""``Editor``: the edits asked of a savepoint, recorded in order, applied when it is written.

Each operation checks what it names against the savepoint as edited so far (an operator
renamed by an earlier step is found under its new uid), records one :class:`EditStep`
(``editor.steps``; ``print(editor)`` lists them) and returns the editor, so edits chain.
Nothing is read past the metadata and the keyed-state headers until :meth:`Editor.write`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import EditError
from ..keygroups import UPPER_BOUND_MAX_PARALLELISM
from ..readers.flink.metadata import OperatorState
from ..readers.flink.operatorid import operator_id_for_uid
from ..readers.flink.reader import FlinkSnapshotReader
from ..format import budget
from ..format.snapshot import is_snapshot_folder
from ..stored.memory import parse_memory_budget
from . import engine, flink
from .flink import hashable_key
from .values import Touched


@dataclass(frozen=True)
class EditStep:
    """One recorded edit: the operation's name and its arguments."""

    operation: str
    arguments: tuple[tuple[str, Any], ...]

    def __str__(self) -> str:
        args = ", ".join(f"{k}={_show(v)}" for k, v in self.arguments)
        return f"{self.operation}({args})"


def _show(v: Any) -> str:
    if callable(v):
        return getattr(v, "__name__", "<function>")
    return repr(v)


@dataclass
class OperatorPlan:
    """What becomes of one operator of the input: its new identity and what of its keyed state is kept."""

    source: OperatorState
    uid: str | None
    operator_id: str
    max_parallelism: int
    name: str | None = None
    #: the parallelism the savepoint declares for the operator after the edit (None: the input's)
    parallelism: int | None = None
    dropped: bool = False
    dropped_states: set[str] = field(default_factory=set)
    dropped_keys: list[frozenset] = field(default_factory=list)
    #: state name -> predicates on one row (``{"key", "namespace", "user_key", "value"}``) that keep it
    filters: dict[str, list[Callable[[dict], bool]]] = field(default_factory=dict)
    #: state name -> functions of one row giving its new value, applied in order
    mappers: dict[str, list[Callable[[dict], Any]]] = field(default_factory=dict)
    #: [state, key, user key, rows changed] of each update(), checked after the write found its rows
    updates: list[list] = field(default_factory=list)
    #: operator (non-keyed) state name -> what ``set_operator_state`` writes (the format's own spec)
    operator_states: dict[str, Any] = field(default_factory=dict)
    #: keyed state name -> what ``bootstrap`` writes (the format's own spec)
    bootstrapped: dict[str, Any] = field(default_factory=dict)

    #: the operator id a uid gives (Flink's hash of it; the engine's operators are identified by uid)
    id_for: Callable[[str], str] = operator_id_for_uid

    def names(self) -> set[str]:
        out = {self.operator_id}
        if self.uid:
            out |= {self.uid, self.id_for(self.uid)}
        if self.name and self.uid == self.source.uid:
            out.add(self.name)
        return out


class Editor:
    """Edits of one Flink canonical savepoint, or of one of the engine's own savepoints (see module doc);
    :func:`explorer.edit` makes one."""

    def __init__(self, path: str | Path, **open_options: Any) -> None:
        self.path = Path(path)
        self.steps: list[EditStep] = []
        #: what :meth:`write` may hold at once, in bytes (``memory_budget=`` as for ``explorer.open``: bytes or a size
        #: such as ``"2GB"``; default half the memory available)
        self.memory_budget = parse_memory_budget(open_options.pop("memory_budget", None))
        if is_snapshot_folder(self.path):  # the engine's own format (explorer.format.snapshot)
            self._format: Any = engine
            self.reader: Any = engine.EngineSavepoint(path, **open_options)
            engine.check_editable(self.reader)
            operators = self.reader.operators
        else:
            self._format = flink
            self.reader = FlinkSnapshotReader(path, **open_options)
            self.reader.memory_budget = self.memory_budget
            flink.check_editable(self.reader)
            operators = self.reader.meta.operators
        self._plans = [OperatorPlan(op, op.uid, op.operator_id, op.max_parallelism, op.name,
                                    id_for=self._format.operator_id if self._format is engine else operator_id_for_uid)
                       for op in operators]

    @property
    def format(self) -> str:
        """``"flink"`` (a Flink canonical savepoint) or ``"engine"`` (the engine's own)."""
        return "engine" if self._format is engine else "flink"

    # -- what is recorded ---------------------------------------------------------------------------------
    def __repr__(self) -> str:
        lines = [f"explorer.edit({str(self.path)!r})"] + [f"  .{s}" for s in self.steps]
        return "\n".join(lines)

    __str__ = __repr__

    def _record(self, operation: str, **arguments: Any) -> Editor:
        self.steps.append(EditStep(operation, tuple(arguments.items())))
        return self

    def _plan(self, operator: str) -> OperatorPlan:
        # a uid is also found by the operator id Flink derives from it (metadata before Flink 2.0 records no uids)
        found = [p for p in self._plans if not p.dropped and (operator in p.names() or p.id_for(operator) in p.names())]
        if not found:
            known = sorted(p.uid or p.operator_id for p in self._plans if not p.dropped)
            raise EditError(f"{self.path}: no operator {operator!r} (after the edits so far); expected a uid or "
                            f"operator id of one of: {', '.join(known)}")
        return found[0]

    def _states(self, plan: OperatorPlan) -> list[str]:
        return [s for s in self._format.state_names(self.reader, plan.source) if s not in plan.dropped_states]

    def _state(self, plan: OperatorPlan, state: str) -> str:
        names = self._states(plan)
        if state not in names:
            raise EditError(f"{self.path}: operator {plan.uid or plan.operator_id!r} has no keyed state {state!r} "
                            f"(after the edits so far); expected one of: {', '.join(names) or 'none'}")
        return state

    # -- operations ---------------------------------------------------------------------------------------
    def drop_operator(self, uid: str) -> Editor:
        """Leave the operator (all its state, keyed and operator state) out of the written savepoint."""
        self._plan(uid).dropped = True
        return self._record("drop_operator", uid=uid)

    def rename_operator(self, old_uid: str, new_uid: str) -> Editor:
        """Give the operator a new uid; its operator id becomes the one Flink derives from ``new_uid`` (as Flink's
        ``SavepointWriter.changeOperatorIdentifier``); a name that was the old uid becomes the new one."""
        plan = self._plan(old_uid)
        new_id = plan.id_for(new_uid)
        if any(p is not plan and not p.dropped and new_id == p.operator_id for p in self._plans):
            raise EditError(f"{self.path}: cannot rename {old_uid!r} to {new_uid!r}: another operator already has "
                            f"operator id {new_id}")
        if plan.name is not None and plan.name == plan.uid:
            plan.name = new_uid
        plan.uid, plan.operator_id = new_uid, new_id
        return self._record("rename_operator", old_uid=old_uid, new_uid=new_uid)

    def drop_state(self, *, operator: str, state: str) -> Editor:
        """Leave one keyed state (every entry, and its registration) out of the operator's state."""
        plan = self._plan(operator)
        plan.dropped_states.add(self._state(plan, state))
        return self._record("drop_state", operator=operator, state=state)

    def drop_keys(self, *, operator: str, keys: Iterable[Any]) -> Editor:
        """Leave out every entry (of every keyed state and timer) of these keys, as the reader shows keys."""
        plan = self._plan(operator)
        if isinstance(keys, (str, bytes)):
            keys = [keys]
        keys = frozenset(hashable_key(k) for k in keys)
        plan.dropped_keys.append(keys)
        return self._record("drop_keys", operator=operator, keys=sorted(keys, key=repr))

    def filter(self, *, operator: str, state: str, where: Callable[[dict], bool]) -> Editor:
        """Keep the rows of one state for which ``where(row)`` is true (``row``: a dict of ``key``,
        ``namespace``, ``user_key``, ``value`` as the reader decodes them); list elements one by one."""
        if not callable(where):
            raise TypeError(f"filter(where=...): found {type(where).__name__}, expected a function of a row")
        plan = self._plan(operator)
        plan.filters.setdefault(self._state(plan, state), []).append(where)
        return self._record("filter", operator=operator, state=state, where=where)

    def map_values(self, *, operator: str, state: str, fn: Callable[[dict], Any], last_access: Any = None) -> Editor:
        """Give every row of one state the value ``fn(row)`` (``row`` as for :meth:`filter`, with ``last_access``
        in epoch ms for a state with a TTL); values the writer cannot encode exactly (see ``editing.values``) are
        refused when written. A TTL state's rows keep their last-access time, or take ``last_access`` (epoch ms
        or a timestamp) when given."""
        if not callable(fn):
            raise TypeError(f"map_values(fn=...): found {type(fn).__name__}, expected a function of a row")
        plan = self._plan(operator)
        step = fn
        if last_access is not None:
            def step(row: dict, fn=fn) -> Any:
                return Touched(fn(row), last_access)
            step.__name__ = getattr(fn, "__name__", "fn")
        plan.mappers.setdefault(self._state(plan, state), []).append(step)
        more = {} if last_access is None else {"last_access": last_access}
        return self._record("map_values", operator=operator, state=state, fn=fn, **more)

    def update(self, *, operator: str, state: str, key: Any, value: Any, user_key: Any = None,
               last_access: Any = None) -> Editor:
        """Set the value of one existing row (a key's value, or one map entry's with ``user_key``); a row the
        savepoint does not hold is refused when written (adding state is not an edit of this kind). A TTL
        state's row keeps its last-access time, or takes ``last_access`` (epoch ms or a timestamp) when given."""
        plan = self._plan(operator)
        name = self._state(plan, state)
        want_key = hashable_key(key)
        record = [name, want_key, user_key, 0]
        plan.updates.append(record)

        def set_one(row: dict) -> Any:
            if hashable_key(row["key"]) == want_key and (user_key is None or row["user_key"] == user_key):
                record[3] += 1
                return value if last_access is None else Touched(value, last_access)
            return row["value"]

        set_one.__name__ = f"set {key!r}"
        plan.mappers.setdefault(name, []).append(set_one)
        more = {} if last_access is None else {"last_access": last_access}
        return self._record("update", operator=operator, state=state, key=key, value=value, user_key=user_key, **more)

    def set_operator_state(self, uid: str, name: str, values: Any, *, mode: str = "split",
                           value_type: Any = None, key_type: Any = None) -> Editor:
        """Replace (or add) one operator state of the operator: ``mode="split"`` (even-split redistribution)
        or ``"union"`` with ``values`` a list, ``"broadcast"`` with ``values`` a dict. An existing state keeps
        its declared types and mode; a new one takes ``value_type``/``key_type`` or the values' own type."""
        plan = self._plan(uid)
        spec = self._format.operator_state_spec(self.reader, plan, name, values, mode, value_type, key_type)
        plan.operator_states[name] = spec
        return self._record("set_operator_state", uid=uid, name=name, values=values, mode=mode)

    def bootstrap(self, uid: str, state: str, frame: Any, *, kind: str = "value", value_type: Any = None,
                  user_key_type: Any = None, parallelism: int | None = None,
                  max_parallelism: int | None = None) -> Editor:
        """Create keyed state ``state`` of a NEW operator ``uid`` from a DataFrame: columns ``key``, ``value``
        (``kind="value"``; ``"list"``: one row per element, in order) or ``key``, ``user_key``, ``value``
        (``"map"``). Types are the columns' own (or ``value_type``/``user_key_type``); keys go to the key group
        Flink assigns them. Several calls with one uid give the operator several states. In a Flink savepoint:
        value, list and map states of String, Long or Integer (``value_type="Integer"``) values and map keys,
        String or Long keys."""
        new = [p for p in self._plans if not p.dropped and p.uid == uid and p.bootstrapped]
        if new:
            plan = new[0]
        else:
            if any(not p.dropped and uid in p.names() for p in self._plans):
                raise EditError(f"{self.path}: operator {uid!r} is in the savepoint; bootstrap creates the state of a "
                                "new operator (edit an existing one's rows with map_values/update)")
            src = self._format.new_operator(self.reader, uid, parallelism, max_parallelism)
            plan = OperatorPlan(src, uid, src.operator_id, src.max_parallelism, uid,
                                id_for=engine.operator_id if self._format is engine else operator_id_for_uid)
        spec = self._format.bootstrap_spec(self.reader, plan, state, frame, kind, value_type, user_key_type)
        if not new:
            self._plans.append(plan)
        plan.bootstrapped[state] = spec
        if self._format is engine:
            plan.source.meta["states"].append(spec["desc"])
        return self._record("bootstrap", uid=uid, state=state, rows=len(spec["rows"]), kind=kind)

    def with_max_parallelism(self, max_parallelism: int, *, operator: str | None = None) -> Editor:
        """Re-assign every key to its key group under ``max_parallelism`` (every operator, or one); keys whose
        Java hash State Explorer cannot reproduce are refused when written."""
        if isinstance(max_parallelism, bool) or not isinstance(max_parallelism, int):
            raise TypeError(f"with_max_parallelism: found {max_parallelism!r}, expected an int")
        plans = [self._plan(operator)] if operator is not None else [p for p in self._plans if not p.dropped]
        for p in plans:
            par = p.parallelism or p.source.parallelism
            if not 0 < par <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
                raise EditError(f"{self.path}: operator {p.uid or p.operator_id!r} runs at parallelism "
                                f"{par}; expected {par} <= max parallelism <= "
                                f"{UPPER_BOUND_MAX_PARALLELISM}, found {max_parallelism}")
        for p in plans:
            p.max_parallelism = max_parallelism
        return self._record("with_max_parallelism", max_parallelism=max_parallelism, operator=operator)

    def with_parallelism(self, parallelism: int, *, operator: str | None = None) -> Editor:
        """Write the operator's state (every keyed operator, or the one named) split for ``parallelism``
        subtasks: each subtask's
        handle holds the key groups Flink's ``KeyGroupRangeAssignment`` gives it at that parallelism, and
        the operator (non-keyed) state of subtasks past it goes to subtask ``index % parallelism``, as a
        restore at that parallelism redistributes it. Flink (and the engine) rescale on restore anyway: this
        is for a savepoint read or edited again, or a job whose parallelism is taken from the savepoint."""
        if isinstance(parallelism, bool) or not isinstance(parallelism, int):
            raise TypeError(f"with_parallelism: found {parallelism!r}, expected an int")
        # without operator=: the keyed operators, whose state is split by key group (a source's positions or
        # splits stay as they are unless it is named)
        plans = [self._plan(operator)] if operator is not None else \
            [p for p in self._plans if not p.dropped and (self._states(p) or p.bootstrapped)]
        for p in plans:
            if not 0 < parallelism <= p.max_parallelism:
                raise EditError(f"{self.path}: operator {p.uid or p.operator_id!r} has max parallelism "
                                f"{p.max_parallelism}; expected 0 < parallelism <= {p.max_parallelism}, found "
                                f"{parallelism}")
        for p in plans:
            if p.operator_states and (p.parallelism or p.source.parallelism) != parallelism:
                raise EditError(f"{self.path}: operator {p.uid or p.operator_id!r}: set_operator_state() was given "
                                "for the old parallelism; call with_parallelism() first, then set_operator_state()")
        for p in plans:
            p.parallelism = parallelism
        return self._record("with_parallelism", parallelism=parallelism, operator=operator)

    # -- writing ------------------------------------------------------------------------------------------
    def write(self, out_path: str | Path) -> Path:
        """Write the edited savepoint into ``out_path`` (new, or an empty folder); the input is not touched. What
        the write must hold at once is checked against ``memory_budget`` before it is read (a Flink operator's
        entries stream a key group at a time unless the edit moves keys to a new max parallelism): a
        :class:`~explorer.errors.SnapshotTooLargeError` says which ``memory_budget=`` would admit it."""
        with budget.using(self.memory_budget):
            if self._format is engine:
                return engine.write_savepoint(self.reader, self._plans, Path(out_path), steps=self.steps)
            return flink.write_savepoint(self.reader, self._plans, Path(out_path))

