"""One silo of a deployment, independent of the transport: what a Flower ClientApp runs.

A :class:`SiloNode` is configured by its own **node config** (set by the hospital that runs it,
never by the server):

``data-path``
    its shard (:func:`pfair.datasets.read_shard`, CSV or Parquet);
``state-dir``
    where its ledger (``ledger.json``) and its current run's noise plan live, so that both
    survive the SuperNode starting a fresh process per message, restarts and rejoins;
``silo-id``
    its index in the federation (part of every stream's derivation and of its messages);
``n-groups``, ``n-classes``
    the sizes of the federation's global group and label codes (agreed by all silos). A message
    saying otherwise is refused before the shard is read: otherwise a server could send
    ``n-groups = k'`` and learn from the refusal whether some record's group code is ``k'`` or
    more, for free and as often as it likes;
``epsilon``, ``delta``
    its own budget over all runs (the server's run config may ask for at most this);
``test-path``
    optional local test shard for evaluate messages. An evaluation is a DP release charged to the
    silo's ledger (:meth:`SiloNode.evaluate`): at most ``evaluations-per-run`` (default 1) for a
    run the silo planned, each costing ``evaluate-epsilon`` (default :data:`EVALUATE_EPSILON`);
    ``allow-exact-evaluate = true`` answers exact metrics instead, unlimited and uncharged, which
    a server can turn into a query oracle of every test record's s (warned, and reported as not
    covered);
``noise-seed``
    optional, for reproducing a simulation only (the guarantee then does not hold against anyone
    who knows it; the node answers one run with it). Without it, every message draws fresh noise
    keys from the OS;
``allow-models``
    which model factories the silo may build for deep runs (default ``pfair.torch.models:*``;
    see :mod:`pfair.flower.models`);
``ledger-anchor``
    a file outside ``state-dir`` (another disk, or a directory not restored with the state's
    backups) that keeps a second journal of the ledger's writes; by default
    :func:`default_anchor` (in ``$PFAIR_ANCHOR_DIR``, else the user's
    ``$XDG_STATE_HOME/pfair/anchors``), ``none`` turns it off (warned, reported as not covered),
    and one inside ``state-dir`` is refused. The journal beside the ledger refuses a ledger
    restored from an older copy, replaced or deleted (:class:`~pfair.exceptions.LedgerRollback`);
    the anchor does so even when the whole state directory, journal included, was restored or
    emptied, and refuses a ledger written under it that it has no record of;
``histogram-share``, ``histogram-fairness``
    what the silo's DP histogram of s costs, and for which notions it is released: a share (default
    :data:`HISTOGRAM_SHARE`) of ``min(epsilon, max-run-epsilon)``, for the comma-separated notions
    ``demographic_parity``, ``equalized_odds``, ``equal_opportunity:<positive class>``,
    ``false_positive_rate_parity:<positive class>`` (default :data:`HISTOGRAM_FAIRNESS`), each
    released once. The run config's ``epsilon`` and ``p_s_epsilon_share`` do not price it, and a
    hello for another notion is refused before anything is read or charged
    (:meth:`SiloNode.hello_bound`: the most any hellos can spend);
``allow-score-histogram``
    ``true`` to answer ``query.score_histogram`` (private post-processing); off by default;
``max-run-epsilon``, ``max-violation-share``, ``max-validation-share``
    the silo's own caps (defaults: its whole ``epsilon``, :data:`MAX_VIOLATION_SHARE`,
    :data:`MAX_VALIDATION_EPSILON_SHARE`): the most ε one run may ask for, and the largest shares of
    it the run's fairness-target releases and (record mode) validation tables may take. A message
    asking for more is refused before anything is read or charged: the shares are the silo's
    budget, not the server's to set. A run's checkpoint releases and evaluations are answered only
    after it answered a round, so before its first round a server can spend the hello bound only.

The **run config** (public, from the server) carries the SteFFLe settings; the node takes
``noise_seed`` from its own config only, and it answers runs with shuffled epochs or full batches
only (random batches are accounted for run lengths fixed in advance, and the server decides when
a run stops: ``docs/privacy.md``, "A deployed silo"). Every method loads the ledger from disk,
charges it before releasing anything, and writes it back (atomically).

One message at a time touches the silo's state: every method that reads or charges the ledger
holds an exclusive lock of ``state-dir/node.lock`` (Flower may run a node's messages in parallel
processes; two answers to one round loaded before either charged would be two noisy replies for
one charge). The ledger refuses a write over a file that changed since it read it, in any case
(:class:`~pfair.exceptions.LedgerConflict`).

The server sends the settings with every message, and the node does not take them on trust: the
plan round saves the run's *terms* (every setting as the node resolved it, the numbers of groups
and classes, the model) beside the noise plan, and a ``train`` or ``violation`` message of that
run under any other terms is refused (:class:`~pfair.exceptions.SettingsMismatch`). Otherwise a
server could plan a run with λ = 0 (nothing to noise, nothing charged) and then ask for ψ parts,
raise a clip norm or change the batch scheme under the planned noise, or pick the batch seed of
each round so that one record is in every batch while the ledger charges one release an epoch.
With a ``noise-seed``, the node answers one run only: a second run would draw the same noise
under other σ's, and two replies of the same round with known σ's give the exact gradient. It
releases one DP histogram of s only, as a second line of defence: every release now draws a stream
of its own (:class:`pfair.protocol.keys.ReleaseId`), but under the stream derivation before, three
histograms of other fairness notions solved for the noise and the exact counts. A run is planned
only for the rounds its settings imply (:func:`check_total_rounds`; ``epochs`` is bounded by
:data:`pfair.settings.MAX_EPOCHS`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pfair import _core
from pfair.exceptions import LedgerMismatch, PrivacyBudgetExceeded, SettingsMismatch
from pfair.privacy import mechanisms
from pfair.privacy.calibration import NoisePlan
from pfair.privacy.ledger import FILE_LOCKS, FILTER_SCHEMES, MechanismEvent, PrivacyLedger, data_fingerprint, file_lock, journals, legacy_fingerprint
from pfair.notions import HISTOGRAM_PREFIX, NOTIONS, FairnessNotion
from pfair.privacy.proportions import HISTOGRAM_SENSITIVITY
from pfair.protocol.messages import CheckpointRelease, SiloMessage
from pfair.protocol.plan import rounds_per_epoch
from pfair.protocol.keys import SiloKeys, evaluation_release, new_secret, noise_key, release_run, restore_key
from pfair.protocol.silo import SiloParty, silo_config
from pfair.providers.linear import LinearProvider
from pfair.settings import SteFFLeSettings
from pfair.validation import holdout

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
    from pfair.settings import CLIP_NAMES, DEEP_DEFAULTS, resolve_deep_defaults

    params = json.loads(raw) if isinstance(raw, str) else dict(raw)
    params["noise_seed"] = None
    # Resolved with the run's epsilon, protection and sampler, as in a fit: clip norms, and the
    # calibration ("auto": the same default as SteFFLe's, the PLD for hidden batches, which a
    # deployed silo refuses, and otherwise the exact account).
    defaults = SteFFLeSettings().as_dict() | {name: "auto" for name in CLIP_NAMES} | {"calibration": "auto"}
    deep = run_config.get("model") not in (None, "", "{}")
    if deep:
        defaults |= DEEP_DEFAULTS
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(f"unknown SteFFLe settings in the run config: {unknown}")
    import warnings

    from pfair.exceptions import PrivacyWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)  # the node reports its own guarantee
        params = {**defaults, **params}
        st = SteFFLeSettings.from_estimator_params(resolve_deep_defaults(params) if deep else params)
    # No party of a deployment knows every silo's size when it calibrates: "auto" is the cap itself.
    return st.for_sizes([st.auto_batch])


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
    import dataclasses

    terms = {"settings": dataclasses.asdict(settings), "n_groups": int(n_groups), "n_classes": int(n_classes),
             "model": dict(model) if model is not None else None}
    return json.loads(json.dumps(terms, sort_keys=True, default=_jsonable))


def _differences(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """The names of what differs between two runs' terms (settings by name)."""
    out = [f"settings.{k}" for k in sorted(set(saved["settings"]) | set(now["settings"]))
           if saved["settings"].get(k) != now["settings"].get(k)]
    return out + [k for k in ("n_groups", "n_classes", "model") if saved.get(k) != now.get(k)]


class SiloNode:
    """One deployed silo (see the module docstring)."""

    def __init__(self, node_config: Mapping[str, Any], *, n_groups: int | None = None, n_classes: int | None = None,
                 model: Mapping[str, Any] | None = None) -> None:
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
        from pfair.settings import MEANINGFUL_EPSILON

        if self.budget > MEANINGFUL_EPSILON:
            import warnings

            from pfair.exceptions import PrivacyWarning

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
        self.model = model
        from pfair.flower.models import DEFAULT_ALLOWED

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
        from pfair.datasets.shards import read_shard

        self.X, self.y, self.s, self.feature_names = read_shard(self.data_path, n_groups=n_groups, n_classes=n_classes)
        self.n_records = int(self.y.shape[0])
        self.state_dir.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ state on disk
    def _locked(self) -> Any:
        """Exclusive use of the silo's state for one message (see the module docstring)."""
        return file_lock(self.state_dir / LOCK_FILE)

    def ledger(self) -> PrivacyLedger:
        """This silo's persistent ledger (created with its own budget on first use)."""
        path = self.state_dir / LEDGER_FILE
        if not path.exists() and (self.state_dir / PLAN_FILE).exists():
            from pfair.exceptions import LedgerRollback

            raise LedgerRollback(f"silo {self.silo_id}: the state directory holds a run's plan but no ledger: the "
                                 "ledger was deleted, and a new one would answer that run's rounds again. Restore "
                                 "the latest ledger, or start the silo over on purpose with `pfair node reset "
                                 "--state-dir DIR --i-understand`")
        from pfair.settings import check_delta, default_delta

        if path.exists():
            ledger = PrivacyLedger.load(path, anchor=self.anchor)
        else:
            delta = self.delta if self.delta is not None else default_delta(self.n_records)
            check_delta(delta, self.n_records, party=f"silo {self.silo_id} (node config delta)")
            ledger = PrivacyLedger(epsilon=self.budget, delta=delta, silo=self.silo_id, path=path, anchor=self.anchor)
            ledger.save(path)  # refused (LedgerRollback) if the journals say a ledger was deleted here
        check_delta(ledger.delta, self.n_records, party=f"silo {self.silo_id} (its ledger's delta)")
        return ledger.bind(data_fingerprint(self.X, self.y, self.s),
                           legacy=lambda: legacy_fingerprint(self.X, self.y, self.s))

    def _settings(self, settings: SteFFLeSettings, ledger: PrivacyLedger, check_budget: bool = True) -> SteFFLeSettings:
        import dataclasses

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
        self._check_caps(settings, run_epsilon=check_budget)
        return dataclasses.replace(settings, noise_seed=self.noise_seed, delta=ledger.delta)

    def _check_caps(self, settings: SteFFLeSettings, run_epsilon: bool = True) -> None:
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

    def _terms(self, settings: SteFFLeSettings, ledger: PrivacyLedger) -> dict:
        """:func:`run_terms` of ``settings`` as this node answers under them."""
        st = self._settings(settings, ledger, check_budget=False)
        return run_terms(st, n_groups=self.n_groups, n_classes=self.n_classes, model=self.model)

    def _check_terms(self, saved: Mapping[str, Any], terms: Mapping[str, Any], run_id: str) -> None:
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

    def _party(self, settings: SteFFLeSettings, check_budget: bool = True, batch_key: Any = None,
               ledger: PrivacyLedger | None = None) -> SiloParty:
        ledger = ledger if ledger is not None else self.ledger()
        st = self._settings(settings, ledger, check_budget)
        # The run's held-out share (pfair.validation.holdout: positions from the public seed only);
        # the party trains on the rest. Its δ and its ledger stay those of all its records.
        train, held = holdout(self.n_records, st.validation_share, seed=st.seed, silo=self.silo_id)
        X, y, s = self.X[train], self.y[train], self.s[train]
        if self.model is None:
            silo_set = _core.SiloSet([(X, y, s)], n_groups=self.n_groups, n_classes=self.n_classes,
                                     **st.notion.core_args())
            provider: Any = LinearProvider(silo_set, 0, silo_config(st, len(y), None))
        else:
            from pfair.federation import Silo
            from pfair.flower.models import build_module
            from pfair.providers.torch import TorchProvider

            module = build_module(self.model, allowed=self.allow_models)
            provider = TorchProvider.for_silo(module, Silo(X, y, s), st, n_groups=self.n_groups,
                                              n_classes=self.n_classes, input_shape=self.model["input_shape"])
        keys = SiloKeys.for_silo(st)  # fresh OS entropy per message, or the node's own noise-seed
        if batch_key is not None:
            keys = SiloKeys(batch=batch_key, noise=keys.noise)
        validation = None
        if st.validation_share > 0:
            Xv = self.X[held]
            validation = (lambda theta: self._predict(Xv, theta), self.y[held], self.s[held])
        return SiloParty(silo_id=self.silo_id, y=y, s=s, settings=st, provider=provider, ledger=ledger,
                         n_groups=self.n_groups, n_classes=self.n_classes, keys=keys,
                         predict=lambda theta: self._predict(X, theta), validation=validation,
                         n_silo_records=self.n_records, n_features=int(self.X.shape[1]))

    def _predict(self, X: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """Predicted class of each row of ``X`` (the silo's records) under θ."""
        if X.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        return np.argmax(self._predict_proba(X, np.asarray(theta, dtype=np.float64)), axis=1)

    # ------------------------------------------------------------------ the protocol
    def hello(self, settings: SteFFLeSettings) -> dict[str, Any]:
        """The p_s round: the silo's size, and its DP histogram of s when the run uses ``p_s="dp"``
        (charged to the ledger once; a later run reuses it, and the ledger refuses it past the
        silo's budget). Whether the run's ε fits this silo's budget is decided at the plan round.

        What the histogram costs is the silo's alone: ``histogram-share · min(epsilon,
        max-run-epsilon)`` of its node config (the run config's ε and ``p_s_epsilon_share`` are not
        read), for the notions of its ``histogram-fairness`` only (another is refused before anything
        is read or charged), and once per notion: every later hello of that notion, in any run, gets
        the same release again at no cost. So no sequence of hellos spends more than
        :meth:`hello_bound` (docs/privacy.md, "A deployed silo")."""
        import dataclasses

        with self._locked():
            ledger = self.ledger()
            out: dict[str, Any] = {"n_records": self.n_records, "n_features": int(self.X.shape[1])}
            if settings.epsilon is None or settings.p_s_source != "dp" or not settings.sends_psi:
                self._party(settings, check_budget=False, ledger=ledger)  # the settings' checks (ε None refused)
                return out
            name = settings.notion.histogram_name
            if name not in self.histogram_releases:
                raise SettingsMismatch(
                    f"silo {self.silo_id}: the run asks for a histogram of s for {name[len(HISTOGRAM_PREFIX):]!r}; this "
                    f"silo releases one for {sorted(r[len(HISTOGRAM_PREFIX):] for r in self.histogram_releases)} only "
                    "(node config histogram-fairness). Nothing was read or charged; add the notion to "
                    "histogram-fairness if this silo takes part in such runs, or run with public proportions p_s")
            # The silo's own price, whatever the run config names (ε, share): a server cannot buy a
            # larger histogram, nor one for a notion the silo did not agree to.
            settings = dataclasses.replace(settings, epsilon=min(ledger.epsilon, self.max_run_epsilon),
                                           p_s_epsilon_share=self.histogram_share)
            party = self._party(settings, check_budget=False, ledger=ledger)
            others = sorted(k for k in ledger.releases if k.startswith(HISTOGRAM_PREFIX) and k != name)
            if self.noise_seed is not None and others:
                raise SettingsMismatch(
                    f"silo {self.silo_id}: its noise-seed released a histogram already ({', '.join(others)}); "
                    "every histogram of one seed carries the same noise, so a second one of other counts "
                    "would give the noise and the exact counts away. Give the node another noise-seed (or "
                    "none)")
            if name not in ledger.releases:
                # Whether the silo takes part is decided before it releases anything: with its
                # own size for the federation's mean (the server's T is not known yet).
                refusal = self._refusal(party, rounds_per_epoch(party.settings.sampling, [party.n_records],
                                                                party.settings.batch_size))
                if refusal is not None:
                    out["refused"] = refusal
                    return out
            out["histogram"] = party.release_group_counts()
            return out


    def hello_bound(self) -> float:
        """The most ε any sequence of hellos can make this silo's ledger spend (its node config
        alone): one histogram per notion of ``histogram-fairness`` (k of them), each a full-batch
        Gaussian release of noise multiplier z_h that costs ``histogram-share · min(epsilon,
        max-run-epsilon)`` alone; k of them compose to a Gaussian mechanism of μ = √k / z_h, whose
        ε at the ledger's δ is what the ledger charges (its exact currency)."""
        from pfair.privacy.proportions import histogram_event, histogram_noise_multiplier

        with self._locked():
            ledger = self.ledger()
        z_h = histogram_noise_multiplier(epsilon=min(ledger.epsilon, self.max_run_epsilon), share=self.histogram_share,
                                         delta=ledger.delta)
        fresh = PrivacyLedger(epsilon=ledger.epsilon, delta=ledger.delta)
        return fresh.epsilon_with([histogram_event(z_h)] * len(self.histogram_releases))

    def _evaluation_reserve(self, settings: SteFFLeSettings, ledger: PrivacyLedger) -> tuple:
        """The evaluation releases a run of this silo may have (its test shard, ``evaluations-per-run``
        of ``evaluate-epsilon`` each): paid for in its plan, so that the rounds leave room for them
        (none without a test shard, or with exact evaluation, which is not charged)."""
        if self.test_path is None or self.exact_evaluate:
            return ()
        z = evaluation_noise_multiplier(self.evaluate_epsilon, ledger.delta)
        return (MechanismEvent.gaussian_histogram(noise_multiplier=z, name="evaluation"),) * self.evaluations_per_run

    def _refusal(self, party: SiloParty, rounds_per_epoch: int) -> str | None:
        """Why this silo refuses the run (its :class:`~pfair.exceptions.BudgetTooSmall` message), or None."""
        from pfair.exceptions import BudgetTooSmall

        try:
            party.preflight(int(party.settings.epochs) * int(rounds_per_epoch),
                            reserve=self._evaluation_reserve(party.settings, party.ledger))
        except BudgetTooSmall as exc:
            log.warning("silo %s refuses the run: %s", self.silo_id, exc)
            return f"BudgetTooSmall: {exc}"
        return None

    def plan(self, settings: SteFFLeSettings, proportions: np.ndarray, total_rounds: int, run_id: str) -> dict:
        """Calibrate this silo's noise for the run (or restore the plan of a run it already
        planned) and return the plan: its σ's, z and ε, which are public."""
        with self._locked():
            return self._plan(settings, proportions, total_rounds, run_id)

    def _saved_plan(self) -> dict | None:
        """The silo's current run as its plan round saved it (None before any plan)."""
        path = self.state_dir / PLAN_FILE
        return json.loads(path.read_text()) if path.exists() else None

    def _plan(self, settings: SteFFLeSettings, proportions: np.ndarray, total_rounds: int, run_id: str) -> dict:
        path = self.state_dir / PLAN_FILE
        ledger = self.ledger()
        terms = self._terms(settings, ledger)
        saved = self._saved_plan()
        if saved is not None:
            if saved["run_id"] == run_id:
                self._check_terms(saved, terms, run_id)
                if saved["total_rounds"] != int(total_rounds):
                    raise SettingsMismatch(f"silo {self.silo_id}: run {run_id!r} was planned for "
                                           f"{saved['total_rounds']} rounds, now asked for {int(total_rounds)}")
                return saved["plan"]
        if ledger.next_round(run_id) > 0:
            # It answered rounds under a plan (and batch key) that another run's replaced: a new
            # plan would draw new batches in the middle of the run's epochs and price its rounds
            # anew. (A run registered but never answered, say its plan file was not written, may
            # be planned again: nothing was drawn, and the ledger refuses another mechanism.)
            raise SettingsMismatch(f"silo {self.silo_id}: run {run_id!r} answered rounds under a plan that is no longer "
                                   "this silo's current one; a run that answered rounds cannot be planned again. Start "
                                   "a new run")
        if self.noise_seed is not None and any(rid != run_id for rid in ledger.runs):
            raise SettingsMismatch(
                f"silo {self.silo_id}: its noise-seed served run(s) {sorted(ledger.runs)} already; a second run "
                "would draw the same noise under other noise scales, and two replies of one round would give "
                "the exact gradient. Give the node another noise-seed (or none) for a new run")
        party = self._party(settings, ledger=ledger)
        check_total_rounds(party.settings, int(total_rounds), silo=self.silo_id)
        plan = party.plan_rounds(np.asarray(proportions, dtype=np.float64), int(total_rounds), run_id=run_id,
                                 reserve=self._evaluation_reserve(party.settings, ledger))
        record = {"run_id": run_id, "plan": plan.as_dict(), "proportions": np.asarray(proportions).tolist(),
                  "terms": terms, "total_rounds": int(total_rounds)}
        if party.keys.batch.is_secret:
            # Batches keyed by a secret (record mode; attribute mode without replacement or
            # Poisson). Every message of the run is a new process, so the run's batch key is drawn
            # once here and kept in the silo's own state: with a fresh key per message, the rounds
            # of an epoch would not be slices of one permutation, and a record could be in several
            # batches of an epoch that the ledger charges as one release.
            record["batch_key"] = new_secret().hex()
        tmp = path.with_suffix(".tmp")
        # Readable by the silo's own user only: the plan may hold the run's secret batch key.
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(json.dumps(record))
        os.replace(tmp, path)
        return record["plan"]

    def _planned_party(self, settings: SteFFLeSettings, run_id: str) -> SiloParty:
        """A party with the saved noise plan of run ``run_id`` adopted."""
        saved = self._saved_plan()
        if saved is None:
            raise RuntimeError(f"silo {self.silo_id} has no noise plan; the server must send the plan query first")
        if saved["run_id"] != run_id:
            raise RuntimeError(f"silo {self.silo_id}: round of run {run_id!r}, but the planned run is {saved['run_id']!r}")
        ledger = self.ledger()
        self._check_terms(saved, self._terms(settings, ledger), run_id)
        batch_key = restore_key(bytes.fromhex(saved["batch_key"])) if "batch_key" in saved else None
        party = self._party(settings, batch_key=batch_key, ledger=ledger)
        party.adopt(NoisePlan(**saved["plan"]), np.asarray(saved["proportions"]), run_id)
        return party

    def train(self, settings: SteFFLeSettings, run_id: str, round: int, theta: np.ndarray, w: np.ndarray) -> SiloMessage:
        """The silo's reply to a round of run ``run_id``: charged first (refused past the budget,
        or if the round was answered before), then exactly the parts of a :class:`SiloMessage`."""
        with self._locked():
            party = self._planned_party(settings, run_id)
            return party.step(np.asarray(theta, dtype=np.float64), np.asarray(w, dtype=np.float64), int(round))

    def checkpoint(self, settings: SteFFLeSettings, run_id: str, epoch: int, theta: np.ndarray) -> CheckpointRelease:
        """The silo's checkpoint release after ``epoch`` of run ``run_id`` (:mod:`pfair.validation`):
        the validation table of its held-out records (exact in attribute mode), and with a fairness
        target its violation histogram; what costs budget is charged to the ledger first and
        noised with the node's own key, and kept in the ledger so that the same epoch asked again
        gets the same release at no cost. Epochs that are not the run's checkpoints are refused."""
        theta = np.asarray(theta, dtype=np.float64).ravel()
        if not np.all(np.isfinite(theta)):
            raise ValueError(f"silo {self.silo_id}: the model sent for a checkpoint is not finite; nothing was read "
                             "or charged")
        # A θ the model cannot take is refused before the charge, by a data-independent check (one
        # row of zeros, not the silo's records): otherwise each such message would burn a release.
        self._predict_proba(np.zeros((1, self.X.shape[1])), theta)
        with self._locked():
            party = self._planned_party(settings, run_id)
            self._check_trained(party.ledger, run_id, "a checkpoint release")
            return party.release_checkpoint(theta, int(epoch))

    def _check_trained(self, ledger: PrivacyLedger | None, run_id: str, what: str) -> None:
        """Refuse ``what`` (a release of a planned run) before the run answered a round: otherwise
        a server could plan run after run and buy each one's checkpoint releases and evaluations
        without training at all, spending the silo's budget before its first round."""
        if ledger is not None and ledger.next_round(run_id) == 0:
            raise SettingsMismatch(f"silo {self.silo_id}: {what} of run {run_id!r}, which has answered no round yet; "
                                   "a silo releases a run's checkpoint figures and evaluations after it trained in "
                                   "that run only. Nothing was read or charged")

    def evaluate(self, settings: SteFFLeSettings, run_id: str, theta: np.ndarray) -> dict[str, float]:
        """Metrics of θ on the local test shard (empty without one), as a DP release.

        Exact metrics of a model the server chooses are a query oracle: sweeping a threshold along
        a direction of θ and reading the demographic-parity gap gives every test record's s in
        n + 1 queries. So by default an evaluation releases the shard's table of counts
        ``c[r, y, ŷ]`` (group, label, prediction) plus Gaussian noise of std ``z_e·√2`` per cell:
        replacing one record (or only its s) moves one count from one cell to another, an L2 change
        of at most √2. ``z_e`` makes one release cost ``evaluate-epsilon`` alone; it is charged to
        the silo's ledger before anything is computed, at most ``evaluations-per-run`` times for a
        run this silo planned (``run_id``). The metrics are computed from the noisy table
        (post-processing). With ``protect="attribute"`` the test error and loss need no s and are
        exact. ``allow-exact-evaluate`` in the node config answers exact metrics instead."""
        if self.test_path is None:
            return {}
        from pfair.datasets.shards import read_shard

        X, y, s, _ = read_shard(self.test_path, n_groups=self.n_groups, n_classes=self.n_classes)
        theta = np.asarray(theta, dtype=np.float64)
        if self.exact_evaluate:
            log.warning("silo %s: exact evaluation (allow-exact-evaluate): the server can read every test record's "
                        "s from repeated queries; not covered by the guarantee", self.silo_id)
            return self._metrics(X, y, s, theta)
        with self._locked():
            ledger = self.ledger()
            st = self._settings(settings, ledger, check_budget=False)
            saved = self._saved_plan()
            if saved is None or saved["run_id"] != run_id or run_id not in ledger.runs:
                raise SettingsMismatch(f"silo {self.silo_id}: evaluation of run {run_id!r}, which is not the run this "
                                       "silo planned last; a silo evaluates the models of its own current run only")
            # Under the run's planned terms only: the protection (whether x and y are released
            # exactly) and the model are the plan's, not what this message says.
            self._check_terms(saved, self._terms(settings, ledger), run_id)
            self._check_trained(ledger, run_id, "an evaluation")
            done = sorted(k for k in ledger.releases if k.startswith(f"{EVALUATION_PREFIX}{run_id}:"))
            if len(done) >= self.evaluations_per_run:
                raise PrivacyBudgetExceeded(
                    f"silo {self.silo_id}: run {run_id!r} had its {self.evaluations_per_run} evaluation(s) "
                    "(node config evaluations-per-run); each is a release of the test shard's s")
            z = evaluation_noise_multiplier(self.evaluate_epsilon, ledger.delta)
            # The stream's index counts the evaluation charges, not the kept releases: a process that
            # died between its charge and its release must not leave the next one the same stream.
            charged = sum(1 for e in ledger.events if e.name == "evaluation")
            table = mechanisms.release_histogram(
                lambda: confusion_by_group(y, np.argmax(self._predict_proba(X, theta), axis=1), s,
                                           n_groups=self.n_groups, n_classes=self.n_classes),
                ledger=ledger, event=MechanismEvent.gaussian_histogram(noise_multiplier=z, name="evaluation"),
                key=noise_key(self.noise_seed), release=evaluation_release(self.silo_id, release_run(ledger, run_id), charged),
                noise_multiplier=z, sensitivity=HISTOGRAM_SENSITIVITY, name=f"{EVALUATION_PREFIX}{run_id}:{len(done)}")
        out = metrics_from_table(table)
        if st.protect == "attribute":  # x and y are not protected: the error and loss need no s
            out.update({k: v for k, v in self._metrics(X, y, None, theta).items() if k in ("test_error", "test_loss")})
        out["n_test"] = float(len(y))
        return out

    def score_histogram(self, theta: np.ndarray, edges: np.ndarray, epsilon: float) -> dict[str, Any]:
        """The silo's DP histogram of θ's scores by (score bin, s, y), for private post-processing
        (:mod:`pfair.postprocessing`; docs/postprocessing.md). The score is the model's probability
        of class 1 (binary labels), binned by the interior ``edges`` the server sends.

        One release is a Gaussian mechanism of L2 sensitivity √2 (replacing one record, or only
        its s, moves one count out of a cell and one into another; θ and the edges are the
        server's, fixed before the release). Its noise multiplier is the smallest that keeps what
        the ledger holds plus this release within ``epsilon``; ``epsilon`` may be at most the
        silo's budget and its ``max-run-epsilon``. Everything is checked, and the release charged
        to the ledger, before the shard's counts are computed; the noise comes from the node's own
        key (fresh OS entropy per message, or its ``noise-seed``, which serves one such release
        only). Returns the noisy table and its noise multiplier (public)."""
        from pfair.privacy.score_histogram import (SCORE_HISTOGRAM_EVENT, check_edges, release_score_histogram,
                                                   score_bins, score_counts)

        edges = check_edges(edges, "edges")
        theta = np.asarray(theta, dtype=np.float64).ravel()
        if not np.all(np.isfinite(theta)):
            raise ValueError(f"silo {self.silo_id}: the model sent for a score histogram is not finite; nothing was "
                             "read or charged")
        if self.n_classes != 2:
            raise SettingsMismatch(f"silo {self.silo_id}: a score histogram is for binary labels; this federation has "
                                   f"{self.n_classes} classes")
        eps = float(epsilon)
        if not self.allow_score_histogram:
            raise SettingsMismatch(f"silo {self.silo_id}: a score histogram is a release a server could ask before any "
                                   "training, up to max-run-epsilon; this silo answers none (node config "
                                   "allow-score-histogram = false, the default). Set allow-score-histogram = true on a "
                                   "silo that takes part in private post-processing. Nothing was read or charged")
        with self._locked():
            ledger = self.ledger()
            cap = min(ledger.epsilon, self.max_run_epsilon)
            if not (np.isfinite(eps) and 0 < eps <= cap * (1 + 1e-12)):
                raise SettingsMismatch(f"silo {self.silo_id}: a score histogram asked for epsilon={eps:g}; this silo "
                                       f"answers at most its budget and max-run-epsilon ({cap:g}). Nothing was read "
                                       "or charged")
            if self.noise_seed is not None and any(e.name == SCORE_HISTOGRAM_EVENT for e in ledger.events):
                raise SettingsMismatch(f"silo {self.silo_id}: its noise-seed released a score histogram already; a "
                                       "second one under a known seed would help remove the noise. Give the node "
                                       "another noise-seed (or none)")

            # The scores read x alone: computed first, so that a θ the model cannot take is refused
            # before the charge. The counts, which read s and y, only once the release is charged.
            bins = score_bins(self._predict_proba(self.X, theta)[:, 1], edges)

            def counts() -> np.ndarray:
                return score_counts(bins, self.s, self.y, n_bins=edges.size + 1, n_groups=self.n_groups)

            table, z = release_score_histogram(counts, ledger=ledger, epsilon=eps, key=noise_key(self.noise_seed),
                                               silo=self.silo_id)
        return {"histogram": table, "noise_multiplier": float(z), "n_records": self.n_records}

    def _metrics(self, X: np.ndarray, y: np.ndarray, s: np.ndarray | None, theta: np.ndarray,
                 proba: np.ndarray | None = None) -> dict[str, float]:
        """Exact metrics of θ on (X, y, s) (without s: error and loss only)."""
        from pfair import metrics

        proba = self._predict_proba(X, theta) if proba is None else proba
        pred = np.argmax(proba, axis=1)
        loss = float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), y], 1e-300, None))))
        out = {"n_test": float(len(y)), "test_loss": loss, "test_error": float(np.mean(pred != y))}
        if s is not None:
            out["demographic_parity_difference"] = metrics.demographic_parity_difference(y, pred, sensitive_features=s)
            out["equalized_odds_difference"] = metrics.equalized_odds_difference(y, pred, sensitive_features=s)
        return out

    def _predict_proba(self, X: np.ndarray, theta: np.ndarray) -> np.ndarray:
        if self.model is None:
            return _core.predict_proba(X, theta, self.n_classes)
        import torch

        from pfair.flower.models import build_module
        from pfair.providers.torch import set_module_theta

        module = set_module_theta(build_module(self.model, allowed=self.allow_models), theta).eval()
        shape = tuple(self.model["input_shape"] or (X.shape[1],))
        dtype = next(module.parameters()).dtype
        with torch.no_grad():
            logits = module(torch.as_tensor(X, dtype=dtype).reshape(-1, *shape))
        return torch.softmax(logits.double(), dim=1).numpy()

    def report(self) -> dict[str, Any]:
        """The ledger's public summary (budget, ε spent, runs) and whether this silo answers exact
        evaluations (``not_covered`` then says so)."""
        with self._locked():
            d = self.ledger().to_dict()
        out = {k: d[k] for k in ("silo", "epsilon_budget", "delta", "epsilon_spent", "epsilon_remaining", "runs")}
        out["exact_evaluate"] = self.exact_evaluate
        out["not_covered"] = (["exact evaluation of the test shard (allow-exact-evaluate)"]
                              if self.exact_evaluate and self.test_path is not None else [])
        if self.anchor is None:
            out["not_covered"].append("a restored or emptied state directory (ledger-anchor = none)")
        return out


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
    import hashlib

    ledger = os.path.join(os.path.realpath(os.fspath(state_dir)), LEDGER_FILE)
    return default_anchor_dir() / f"{hashlib.sha256(ledger.encode()).hexdigest()[:32]}.journal"


def ledger_anchor(value: Any, state_dir: os.PathLike | str, *, silo: Any = None) -> Path | None:
    """The anchor of a node's ledger from its node config's ``ledger-anchor`` (``value``): the file it
    names, :func:`default_anchor` when unset, or None for ``"none"`` (warned: a restored or emptied
    state directory then answers rounds again). An anchor inside ``state_dir`` is refused: a backup of
    the state directory would restore it with the ledger."""
    import warnings

    from pfair.exceptions import PrivacyWarning

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
    from pfair.privacy.accountant import noise_multiplier_for

    return noise_multiplier_for(epsilon=epsilon, delta=delta, sample_rate=1.0, steps=1, sampling="full_batch",
                                accountant="exact")


def confusion_by_group(y: np.ndarray, pred: np.ndarray, s: np.ndarray, *, n_groups: int, n_classes: int) -> np.ndarray:
    """Counts ``c[r, y, ŷ]`` of a shard's records by group, label and prediction."""
    k, l = int(n_groups), int(n_classes)
    flat = np.bincount((np.asarray(s) * l + np.asarray(y)) * l + np.asarray(pred), minlength=k * l * l)
    return flat.reshape(k, l, l).astype(np.float64)


def metrics_from_table(table: np.ndarray) -> dict[str, float]:
    """Test error and the fairness gaps from a (noisy) ``c[r, y, ŷ]`` table (post-processing):
    counts clamped at 0 and rounded, then the records they describe scored by
    :mod:`pfair.metrics`' own definitions. A gap the noisy counts leave undefined (one group left,
    or no class seen in two groups for equalized odds) is left out of the result."""
    from pfair import metrics

    counts = np.rint(np.clip(np.asarray(table, dtype=np.float64), 0, None)).astype(np.int64)
    k, l, _ = counts.shape
    idx = np.repeat(np.arange(counts.size), counts.ravel())
    if idx.size == 0:
        return {}
    r, rest = np.divmod(idx, l * l)
    yy, pp = np.divmod(rest, l)
    out = {"test_error": float(np.mean(yy != pp))}
    if len(np.unique(r)) > 1:
        out["demographic_parity_difference"] = metrics.demographic_parity_difference(yy, pp, sensitive_features=r)
    # Equalized odds needs a true class seen in 2 or more groups; after the noise a small shard's
    # table may have none (every cell of one class clamped to 0): the gap is then left out.
    groups_per_class = (counts.sum(axis=2) > 0).sum(axis=0)
    if (groups_per_class > 1).any():
        out["equalized_odds_difference"] = metrics.equalized_odds_difference(yy, pp, sensitive_features=r)
    return out
