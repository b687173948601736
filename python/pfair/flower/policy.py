"""A deployed silo's policy: what its node config lets a server ask, and the run terms it holds a
server to (:class:`SiloPolicy`), independent of its data and of Flower.

The node config is the silo's own (set by the institution that runs it, never by the server; its
keys are listed in :mod:`pfair.flower.node`). From it the policy keeps the silo's budget and caps
(``epsilon``, ``delta``, ``max-run-epsilon``, ``max-violation-share``, ``max-validation-share``,
``histogram-share``, ``histogram-fairness``, evaluations), where its state lives (``state-dir``:
the ledger, the run's plan file, the lock that makes one message at a time touch them; the ledger
anchor outside it), and it checks a message's settings against them before anything is read or
charged: :meth:`SiloPolicy.settings_for` (private runs, a filter sampler, the budget),
:meth:`SiloPolicy.check_caps`, and :meth:`SiloPolicy.check_terms` (a run's messages under the
terms its plan round saved). :class:`pfair.flower.node.SiloNode` holds the data and answers the
messages under this policy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pfair.exceptions import LedgerMismatch, PrivacyWarning, SettingsMismatch
from pfair.flower.models import DEFAULT_ALLOWED
from pfair.notions import NOTIONS, FairnessNotion
from pfair.privacy.accountant import noise_multiplier_for
from pfair.privacy.ledger import FILE_LOCKS, FILTER_SCHEMES, MechanismEvent, PrivacyLedger, file_lock, journals
from pfair.settings import (AUTO_RUN_BATCH, CLIP_NAMES, DEEP_DEFAULTS, MEANINGFUL_EPSILON, SteFFLeSettings,
                            resolve_deep_defaults)

log = logging.getLogger("pfair.node")

#: Default share of ``min(epsilon, max-run-epsilon)`` the silo's DP histogram of s costs (node config
#: ``histogram-share``; SteFFLe's own default ``p_s_epsilon_share``). The silo's, not the run config's.
HISTOGRAM_SHARE = 0.1
#: Default fairness notions a silo releases its histogram of s for (node config ``histogram-fairness``).
HISTOGRAM_FAIRNESS = "demographic_parity"
#: Default caps of the shares of a run's ε a server may ask for (node config ``max-violation-share``,
#: ``max-validation-share``): a run may ask up to these.
MAX_VIOLATION_SHARE = 0.5
MAX_VALIDATION_EPSILON_SHARE = 0.25

#: ε of one evaluation release (node config ``evaluate-epsilon``), composed in the silo's ledger.
EVALUATE_EPSILON = 0.05
#: Name prefix of the evaluation releases kept in a silo's ledger.
EVALUATION_PREFIX = "evaluation:"

LEDGER_FILE = "ledger.json"
log = logging.getLogger("pfair.node")
PLAN_FILE = "plan.json"
LOCK_FILE = "node"  # the lock is node.lock: one message at a time touches the silo's state


def settings_from_run_config(run_config: Mapping[str, Any]) -> SteFFLeSettings:
    """SteFFLe settings from a run config's ``settings`` entry (a JSON object); ``noise_seed``
    is ignored there: a node's noise is its own business. A setting the entry leaves out takes
    SteFFLe's default, or DeepSteFFLe's when the run config names a deep ``model``
    (:data:`pfair.settings.DEEP_DEFAULTS`; batch and step as for silos of unknown size: 256 and 1.0)."""
    raw = run_config.get("settings")
    if raw is None:
        raise ValueError("the run config has no 'settings' entry (a JSON object of SteFFLe settings)")

    params = json.loads(raw) if isinstance(raw, str) else dict(raw)
    params["noise_seed"] = None
    # Resolved with the run's epsilon, protection and sampler, as in a fit: clip norms, and the
    # calibration ("auto": the same default as SteFFLe's, the PLD for hidden batches, which a
    # deployed silo refuses, and otherwise the exact account).
    defaults = (SteFFLeSettings().as_dict() | {name: "auto" for name in CLIP_NAMES}
                | {"calibration": "auto", "lr_decay": "auto", "decay_every": "auto"})
    deep = run_config.get("model") not in (None, "", "{}")
    if deep:
        defaults |= DEEP_DEFAULTS
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(f"unknown SteFFLe settings in the run config: {unknown}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)  # the node reports its own guarantee
        params = {**defaults, **params}
        st = SteFFLeSettings.from_estimator_params(resolve_deep_defaults(params) if deep else params)
    # No party of a deployment knows every silo's size when it calibrates: "auto" is the cap itself,
    # except that a private attribute-mode run is not stretched to a batch the silos may not hold
    # (it takes AUTO_RUN_BATCH, the batch its epochs and step are stated for; `pfair deploy local`
    # knows the sizes and sends the stretched run written out, as pfair train resolves it). A
    # noise-free run at a large λ is stretched by the cap alone, not by the rounds of a stand-in silo.
    return st.for_sizes([AUTO_RUN_BATCH] if st.stretches_run else [st.auto_batch], sizes_known=False)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a run's terms hold {type(value).__name__!r}, which has no JSON form")


def run_terms(settings: SteFFLeSettings, *, n_groups: int, n_classes: int, model: Mapping[str, Any] | None) -> dict:
    """What a run's noise plan is made for: every setting (as the node resolved them, its own
    ``noise_seed`` and δ included), the sizes of the group and class encodings and the model
    spec, in JSON form, so that a copy saved to disk compares equal to a fresh one."""
    terms = {"settings": dataclasses.asdict(settings), "n_groups": int(n_groups), "n_classes": int(n_classes),
             "model": dict(model) if model is not None else None}
    return json.loads(json.dumps(terms, sort_keys=True, default=_jsonable))


def _differences(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """The names of what differs between two runs' terms (settings by name)."""
    out = [f"settings.{k}" for k in sorted(set(saved["settings"]) | set(now["settings"]))
           if saved["settings"].get(k) != now["settings"].get(k)]
    return out + [k for k in ("n_groups", "n_classes", "model") if saved.get(k) != now.get(k)]


class SiloPolicy:
    """A silo's node config, checked, and the checks it makes of every message (module docstring)."""

    def __init__(self, node_config: Mapping[str, Any], *, n_groups: int | None = None,
                 n_classes: int | None = None) -> None:
        """``n_groups``, ``n_classes``: what the message says (None: the node config's); a message
        that says other numbers than the node config is refused before the shard is read."""
        def need(key: str) -> Any:
            if key not in node_config:
                raise ValueError(f"node config has no {key!r}; set it with --node-config \"{key}=...\"")
            return node_config[key]

        own = {"n-groups": int(need("n-groups")), "n-classes": int(need("n-classes"))}
        said = {"n-groups": n_groups, "n-classes": n_classes}
        differ = [f"{k}={said[k]} (the silo's: {own[k]})" for k in own if said[k] is not None and int(said[k]) != own[k]]
        if differ:
            raise SettingsMismatch(f"silo {node_config.get('silo-id')}: the message says {', '.join(differ)}; the "
                                   "federation's group and label codes are fixed in each silo's node config. Nothing "
                                   "was read or computed")
        n_groups, n_classes = own["n-groups"], own["n-classes"]
        if not FILE_LOCKS:  # pragma: no cover - Windows
            raise RuntimeError("a deployed silo needs POSIX file locks (fcntl.flock) to handle one message at a time; "
                               "run the SuperNode on Linux or macOS")
        self.data_path = Path(str(need("data-path")))
        self.state_dir = Path(str(need("state-dir")))
        self.silo_id = int(need("silo-id"))
        self.budget = float(need("epsilon"))

        if self.budget > MEANINGFUL_EPSILON:
            warnings.warn(f"silo {node_config.get('silo-id')}: node config epsilon={self.budget:g} is above "
                          f"{MEANINGFUL_EPSILON:g}, where a guarantee stops meaning much (one record may make an "
                          "outcome e^epsilon times more likely); set a smaller epsilon", PrivacyWarning, stacklevel=2)
        self.delta = float(node_config["delta"]) if "delta" in node_config else None
        self.test_path = Path(str(node_config["test-path"])) if node_config.get("test-path") else None
        self.anchor = ledger_anchor(node_config.get("ledger-anchor"), self.state_dir, silo=node_config.get("silo-id"))
        self.exact_evaluate = str(node_config.get("allow-exact-evaluate", "false")).lower() in ("1", "true", "yes")
        self.allow_score_histogram = str(node_config.get("allow-score-histogram", "false")).lower() in ("1", "true",
                                                                                                      "yes")
        self.evaluate_epsilon = float(node_config.get("evaluate-epsilon", EVALUATE_EPSILON))
        self.evaluations_per_run = int(node_config.get("evaluations-per-run", 1))
        self.noise_seed = int(node_config["noise-seed"]) if "noise-seed" in node_config else None
        self.n_groups, self.n_classes = int(n_groups), int(n_classes)

        self.allow_models = str(node_config.get("allow-models", DEFAULT_ALLOWED))
        self.max_run_epsilon = float(node_config.get("max-run-epsilon", self.budget))
        if "max-histogram-share" in node_config:
            raise ValueError(f"silo {node_config.get('silo-id')}: node config max-histogram-share is gone: the silo sets "
                             "its histogram's share itself, histogram-share (default "
                             f"{HISTOGRAM_SHARE:g}), and the run config's p_s_epsilon_share is not read. Replace the "
                             "key with histogram-share")
        self.histogram_share = float(node_config.get("histogram-share", HISTOGRAM_SHARE))
        if not (np.isfinite(self.histogram_share) and 0 < self.histogram_share < 1):
            raise ValueError(f"silo {node_config.get('silo-id')}: node config histogram-share={self.histogram_share!r} "
                             "must be in (0, 1): the share of min(epsilon, max-run-epsilon) its histogram of s costs")
        self.histogram_releases = histogram_releases(node_config.get("histogram-fairness", HISTOGRAM_FAIRNESS),
                                                     n_classes=int(n_classes), silo=node_config.get("silo-id"))
        self.max_violation_share = float(node_config.get("max-violation-share", MAX_VIOLATION_SHARE))
        self.max_validation_share = float(node_config.get("max-validation-share", MAX_VALIDATION_EPSILON_SHARE))
        self.state_dir.mkdir(parents=True, exist_ok=True)

    def locked(self) -> Any:
        """Exclusive use of the silo's state for one message (see the module docstring)."""
        return file_lock(self.state_dir / LOCK_FILE)

    def settings_for(self, settings: SteFFLeSettings, ledger: PrivacyLedger, check_budget: bool = True) -> SteFFLeSettings:
        if settings.epsilon is None:
            raise ValueError("a deployed silo answers private runs only (epsilon is None in the run config)")
        if settings.sampling not in FILTER_SCHEMES:
            raise SettingsMismatch(
                f"silo {self.silo_id}: a deployed silo answers runs with sampling='shuffle' (the default with "
                f"protect='attribute') or 'full_batch' only, not {settings.sampling!r}. Random batches are accounted "
                "by how often a record is drawn, averaged over the draws, which holds for run lengths fixed in "
                "advance; a server that stops runs (or splits them into short runs) once a record was drawn often "
                "would spend more than the ledger records. Ask for sampling='shuffle' (with protect='record' too)")
        if check_budget and settings.epsilon > ledger.epsilon * (1 + 1e-12):
            raise LedgerMismatch(f"silo {self.silo_id}: the run asks for epsilon={settings.epsilon:g}, more than this "
                                 f"silo's budget {ledger.epsilon:g}")
        self.check_caps(settings, run_epsilon=check_budget)
        return dataclasses.replace(settings, noise_seed=self.noise_seed, delta=ledger.delta)

    def check_caps(self, settings: SteFFLeSettings, run_epsilon: bool = True) -> None:
        """Refuse a run asking for more ε, or larger shares of it, than this silo's own caps (the
        run's ε from the plan round on: the hello only sizes the silo and releases its histogram,
        whose ε is the silo's own, :meth:`hello`)."""
        over = []
        if run_epsilon and settings.epsilon > self.max_run_epsilon * (1 + 1e-12):
            over.append(f"epsilon={settings.epsilon:g} per run (the silo's cap: max-run-epsilon={self.max_run_epsilon:g})")
        if settings.max_violation is not None and settings.max_violation_epsilon_share > self.max_violation_share:
            over.append(f"max_violation_epsilon_share={settings.max_violation_epsilon_share:g} (cap: "
                        f"max-violation-share={self.max_violation_share:g})")
        if (settings.protect == "record" and settings.checkpoint_epochs()
                and settings.validation_epsilon_share > self.max_validation_share):
            over.append(f"validation_epsilon_share={settings.validation_epsilon_share:g} (cap: max-validation-share="
                        f"{self.max_validation_share:g})")
        if over:
            raise SettingsMismatch(f"silo {self.silo_id}: the run asks for {'; '.join(over)}; the silo's node config "
                                   "caps what one run may spend and how it is split. Nothing was read or charged")

    def terms(self, settings: SteFFLeSettings, ledger: PrivacyLedger, model: Mapping[str, Any] | None) -> dict:
        """:func:`run_terms` of ``settings`` (and the run's ``model``) as this silo answers under them."""
        st = self.settings_for(settings, ledger, check_budget=False)
        return run_terms(st, n_groups=self.n_groups, n_classes=self.n_classes, model=model)

    def check_terms(self, saved: Mapping[str, Any], terms: Mapping[str, Any], run_id: str) -> None:
        """Refuses a message of run ``run_id`` under other terms than the run was planned for."""
        if "terms" not in saved:
            raise SettingsMismatch(f"silo {self.silo_id}: the plan of run {run_id!r} was saved by an older pfair "
                                   "without the settings it was made for; start a new run")
        differ = _differences(saved["terms"], terms)
        if differ:
            raise SettingsMismatch(
                f"silo {self.silo_id}: run {run_id!r} was planned under other settings than this message's "
                f"(differ: {', '.join(differ)}); its noise and its ledger's charges are for the planned ones, so "
                "nothing was computed or sent")

    def saved_plan(self) -> dict | None:
        """The silo's current run as its plan round saved it (None before any plan)."""
        path = self.state_dir / PLAN_FILE
        return json.loads(path.read_text()) if path.exists() else None

    def write_plan(self, record: Mapping[str, Any]) -> None:
        """Save the current run's plan record (atomically; readable by the silo's own user only:
        it may hold the run's secret batch key)."""
        path = self.state_dir / PLAN_FILE
        tmp = path.with_suffix(".tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(json.dumps(record))
        os.replace(tmp, path)

    def evaluation_reserve(self, settings: SteFFLeSettings, ledger: PrivacyLedger) -> tuple:
        """The evaluation releases a run of this silo may have (its test shard, ``evaluations-per-run``
        of ``evaluate-epsilon`` each): paid for in its plan, so that the rounds leave room for them
        (none without a test shard, or with exact evaluation, which is not charged)."""
        if self.test_path is None or self.exact_evaluate:
            return ()
        z = evaluation_noise_multiplier(self.evaluate_epsilon, ledger.delta)
        return (MechanismEvent.gaussian_histogram(noise_multiplier=z, name="evaluation"),) * self.evaluations_per_run


#: Environment variable naming the directory of the default ledger anchors (see :func:`default_anchor`).
ANCHOR_DIR_ENV = "PFAIR_ANCHOR_DIR"
#: Node config value of ``ledger-anchor`` that turns the anchor off (warned; reported as not covered).
NO_ANCHOR = "none"


def default_anchor_dir() -> Path:
    """Where a node keeps its ledger's anchor unless its node config names one: ``$PFAIR_ANCHOR_DIR``,
    else ``$XDG_STATE_HOME/pfair/anchors``, else ``~/.local/state/pfair/anchors``: the node's user's
    own state, outside any silo's ``state-dir``."""
    if os.environ.get(ANCHOR_DIR_ENV):
        return Path(os.environ[ANCHOR_DIR_ENV])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "pfair" / "anchors"


def default_anchor(state_dir: os.PathLike | str) -> Path:
    """The default anchor journal of the ledger in ``state_dir``: a file of :func:`default_anchor_dir`
    named by the SHA-256 of the ledger's absolute path (one file per ledger, so that a journal's tail
    always holds its ledger's last entry)."""
    ledger = os.path.join(os.path.realpath(os.fspath(state_dir)), LEDGER_FILE)
    return default_anchor_dir() / f"{hashlib.sha256(ledger.encode()).hexdigest()[:32]}.journal"


def ledger_anchor(value: Any, state_dir: os.PathLike | str, *, silo: Any = None) -> Path | None:
    """The anchor of a node's ledger from its node config's ``ledger-anchor`` (``value``): the file it
    names, :func:`default_anchor` when unset, or None for ``"none"`` (warned: a restored or emptied
    state directory then answers rounds again). An anchor inside ``state_dir`` is refused: a backup of
    the state directory would restore it with the ledger."""
    if value is not None and str(value).strip().lower() == NO_ANCHOR:
        warnings.warn(f"silo {silo}: node config ledger-anchor=none: nothing outside the state directory records "
                      "its ledger's writes, so restoring a backup of the whole state directory answers rounds again "
                      "and emptying it starts the budget over. Remove the key (the default anchor is "
                      f"{default_anchor(state_dir)}) or name a file on storage that is not backed up with the state",
                      PrivacyWarning, stacklevel=3)
        return None
    anchor = Path(str(value)) if value not in (None, "") else default_anchor(state_dir)
    state = Path(os.path.realpath(os.fspath(state_dir)))
    where = Path(os.path.realpath(os.fspath(anchor)))
    if where == state or state in where.parents:
        raise ValueError(f"silo {silo}: node config ledger-anchor={str(anchor)!r} is inside its state-dir {str(state)!r}; "
                         "a backup of the state directory would restore the anchor with the ledger, and the anchor "
                         "would catch nothing. Name a file outside it (another disk, or a directory that is not "
                         "backed up with the state), or leave the key out for the default anchor")
    return anchor


def histogram_releases(value: Any, *, n_classes: int, silo: Any = None) -> frozenset:
    """The release names (:attr:`pfair.notions.FairnessNotion.histogram_name`) of the histograms of
    s a silo releases, from its node config's ``histogram-fairness``: comma-separated notion names
    (:data:`pfair.notions.NOTIONS`), with ``:<positive class>`` for those whose blocks read it
    (``equal_opportunity:1``)."""
    out = set()
    for item in (v.strip() for v in str(value).split(",")):
        if not item:
            continue
        name, _, positive = item.partition(":")
        cls = NOTIONS.get(name)
        if cls is not None and not cls.uses_positive and not positive:
            out.add(cls().histogram_name)
        elif cls is not None and cls.uses_positive and positive.isdigit() and int(positive) < int(n_classes):
            out.add(cls(positive=int(positive)).histogram_name)
        else:
            spelled = ", ".join(f"{n}:<positive class in 0..{int(n_classes) - 1}>" if c.uses_positive else n
                                for n, c in NOTIONS.items())
            raise ValueError(f"silo {silo}: node config histogram-fairness has {item!r}; name the notions this silo "
                             f"releases a histogram of s for, comma-separated: {spelled}")
    if not out:
        raise ValueError(f"silo {silo}: node config histogram-fairness is empty; name at least one notion (default "
                         f"{HISTOGRAM_FAIRNESS}), or leave the key out")
    return frozenset(out)


def histogram_release(notion: FairnessNotion) -> str:
    """The ``histogram-fairness`` entry of a run's fairness notion (and, where its blocks read it,
    its positive class): what a launcher puts in its silos' node configs."""
    return f"{notion.name}:{int(notion.positive)}" if notion.uses_positive else notion.name


def reset_state(state_dir: os.PathLike | str, *, anchor: os.PathLike | str | None = None,
                i_understand: bool = False) -> list[str]:
    """Start a silo over: remove its ledger, the ledger's journal, its anchor (``anchor``, or the
    :func:`default_anchor` of ``state_dir`` if not given) and its run's plan; returns what was removed. Its budget starts again from nothing
    spent, so the guarantee of the runs it answered before no longer bounds what it releases next:
    refused unless ``i_understand``. Meant for a silo whose data changed, or whose operator accepts
    that cost; a ledger restored from a backup is refused (:class:`~pfair.exceptions.LedgerRollback`)
    until this is run or the latest ledger is put back."""
    state = Path(state_dir)
    if not i_understand:
        raise ValueError(f"resetting {state} erases the silo's record of what it spent: the silo's budget starts "
                         "again, and the runs it answered before are no longer counted against it. Pass "
                         "--i-understand (i_understand=True) to do it")
    ledger = state / LEDGER_FILE
    anchor = default_anchor(state) if anchor is None else anchor
    targets = [ledger, *journals(ledger.resolve() if ledger.exists() else ledger, anchor), state / PLAN_FILE]
    removed = []
    for path in targets:
        if path.exists():
            path.unlink()
            removed.append(str(path))
    return removed


def check_total_rounds(settings: SteFFLeSettings, total_rounds: int, *, silo: int) -> None:
    """Refuse a plan of ``total_rounds`` rounds that the run's settings do not imply: a run is
    ``epochs`` epochs of R ≥ 1 rounds each (``T = epochs · R``, :mod:`pfair.protocol.plan`; R = 1
    with the full batch), and ``epochs`` is at most :data:`pfair.settings.MAX_EPOCHS` (checked
    with the settings). R itself is the federation's ``⌈mean silo size / m⌉``, which one silo does
    not know; more rounds only mean more noise per round, as the plan is calibrated to T."""
    E = int(settings.epochs)
    full = settings.sampling == "full_batch"
    if total_rounds < E or total_rounds % E or (full and total_rounds != E):
        want = f"exactly epochs = {E}" if full else f"a multiple of epochs = {E} (epochs · rounds per epoch)"
        raise SettingsMismatch(f"silo {silo}: the plan asks for total-rounds = {total_rounds}, which these settings do "
                               f"not imply: a run of {E} epochs with sampling={settings.sampling!r} has {want}. "
                               "Nothing was planned or charged; send the run's own total-rounds")


def evaluation_noise_multiplier(epsilon: float, delta: float) -> float:
    """``z_e`` such that one evaluation release alone costs ``epsilon`` at ``delta``: the exact
    Gaussian mechanism's (Balle and Wang, "Improving the Gaussian Mechanism for Differential
    Privacy", 2018), which the ledger's currency prices at ``epsilon`` itself (RDP overpriced it:
    a release of nominal 0.05 cost 0.0438 at 12% more noise than needed)."""
    return noise_multiplier_for(epsilon=epsilon, delta=delta, sample_rate=1.0, steps=1, sampling="full_batch",
                                accountant="exact")
