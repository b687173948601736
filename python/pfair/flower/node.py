"""One silo of a deployment, independent of the transport: what a Flower ClientApp runs.

:class:`SiloNode` holds the silo's data and answers the protocol's messages; what its node config
allows and the run terms it holds a server to are its :class:`~pfair.flower.policy.SiloPolicy`
(``node.policy``). For each message it makes a :class:`~pfair.protocol.silo.SiloParty` from the
ledger on disk, the run's saved plan and fresh keys; a silo host keeps the node, its data and the
Rust data sets of its training splits, between messages (:mod:`pfair.flower.silo_host`).

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

import dataclasses
import logging
from typing import Any, Mapping

import numpy as np

# Imported where they are used: torch (deep models only; an optional extra) and pfair.datasets.shards
# (its package loads scikit-learn), which a ClientApp's start must not load.
from pfair import _core, metrics
from pfair.exceptions import BudgetTooSmall, LedgerRollback, PrivacyBudgetExceeded, SettingsMismatch
from pfair.federation import Silo
from pfair.flower.models import build_module
# The policy's names are part of this module's interface (the node config, its files, its checks).
from pfair.flower.policy import (  # noqa: F401
    ANCHOR_DIR_ENV, EVALUATE_EPSILON, EVALUATION_PREFIX, HISTOGRAM_FAIRNESS, HISTOGRAM_SHARE, LEDGER_FILE, LOCK_FILE,
    MAX_VALIDATION_EPSILON_SHARE, MAX_VIOLATION_SHARE, NO_ANCHOR, PLAN_FILE, SiloPolicy, check_total_rounds,
    default_anchor, default_anchor_dir, evaluation_noise_multiplier, histogram_release, histogram_releases,
    ledger_anchor, reset_state, run_terms, settings_from_run_config)
from pfair.privacy import mechanisms
from pfair.privacy.calibration import NoisePlan
from pfair.privacy.ledger import MechanismEvent, PrivacyLedger, data_fingerprint, legacy_fingerprint
from pfair.notions import HISTOGRAM_PREFIX
from pfair.privacy.proportions import HISTOGRAM_SENSITIVITY, histogram_event, histogram_noise_multiplier
from pfair.privacy.score_histogram import (SCORE_HISTOGRAM_EVENT, check_edges, release_score_histogram, score_bins,
                                           score_counts)
from pfair.protocol.messages import CheckpointRelease, SiloMessage
from pfair.protocol.plan import rounds_per_epoch
from pfair.protocol.keys import SiloKeys, evaluation_release, new_secret, noise_key, release_run, restore_key
from pfair.protocol.silo import SiloParty, silo_config
from pfair.providers.linear import LinearProvider
from pfair.settings import SteFFLeSettings, check_delta, default_delta
from pfair.validation import holdout

log = logging.getLogger("pfair.node")


class SiloNode:
    """One deployed silo (see the module docstring)."""

    def __init__(self, node_config: Mapping[str, Any], *, n_groups: int | None = None, n_classes: int | None = None,
                 model: Mapping[str, Any] | None = None) -> None:
        """``n_groups``, ``n_classes``: what the message says (None: the node config's); a message
        that says other numbers than the node config is refused before the shard is read
        (:class:`~pfair.flower.policy.SiloPolicy`). ``model``: the run's model spec (None: linear)."""
        from pfair.datasets.shards import read_shard

        self.policy = policy = SiloPolicy(node_config, n_groups=n_groups, n_classes=n_classes)
        self.silo_id, self.n_groups, self.n_classes = policy.silo_id, policy.n_groups, policy.n_classes
        self.model = model
        self.X, self.y, self.s, self.feature_names = read_shard(policy.data_path, n_groups=self.n_groups,
                                                                n_classes=self.n_classes)
        self.n_records = int(self.y.shape[0])
        # Derived from the shard alone, kept while this node is (a silo host keeps it between
        # messages, pfair.flower.silo_host): its fingerprint, its training splits, its test shard.
        self._fingerprint: Any = None
        self._splits: dict[tuple, tuple] = {}
        self._test: tuple | None = None

    # ------------------------------------------------------------------ state on disk
    def ledger(self) -> PrivacyLedger:
        """This silo's persistent ledger (created with its own budget on first use)."""
        path = self.policy.state_dir / LEDGER_FILE
        if not path.exists() and (self.policy.state_dir / PLAN_FILE).exists():
            raise LedgerRollback(f"silo {self.silo_id}: the state directory holds a run's plan but no ledger: the "
                                 "ledger was deleted, and a new one would answer that run's rounds again. Restore "
                                 "the latest ledger, or start the silo over on purpose with `pfair node reset "
                                 "--state-dir DIR --i-understand`")

        if path.exists():
            ledger = PrivacyLedger.load(path, anchor=self.policy.anchor)
        else:
            delta = self.policy.delta if self.policy.delta is not None else default_delta(self.n_records)
            check_delta(delta, self.n_records, party=f"silo {self.silo_id} (node config delta)")
            ledger = PrivacyLedger(epsilon=self.policy.budget, delta=delta, silo=self.silo_id, path=path, anchor=self.policy.anchor)
            ledger.save(path)  # refused (LedgerRollback) if the journals say a ledger was deleted here
        check_delta(ledger.delta, self.n_records, party=f"silo {self.silo_id} (its ledger's delta)")
        if self._fingerprint is None:
            self._fingerprint = data_fingerprint(self.X, self.y, self.s)
        return ledger.bind(self._fingerprint, legacy=lambda: legacy_fingerprint(self.X, self.y, self.s))

    def _party(self, settings: SteFFLeSettings, check_budget: bool = True, batch_key: Any = None,
               ledger: PrivacyLedger | None = None) -> SiloParty:
        ledger = ledger if ledger is not None else self.ledger()
        st = self.policy.settings_for(settings, ledger, check_budget)
        # The run's held-out share (pfair.validation.holdout: positions from the public seed only);
        # the party trains on the rest. Its δ and its ledger stay those of all its records.
        train, held, X, y, s = self._split(st.validation_share, st.seed)
        if self.model is None:
            provider: Any = LinearProvider(self._silo_set(st.validation_share, st.seed, st.notion.core_args()), 0,
                                           silo_config(st, len(y), None))
        else:
            from pfair.providers.torch import TorchProvider

            module = build_module(self.model, allowed=self.policy.allow_models)
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

    def _split(self, share: float, seed: Any) -> tuple:
        """The run's held-out split (:func:`pfair.validation.holdout`: positions from the public seed
        only): ``(train, held, X, y, s)`` of the training records."""
        key = (float(share), seed)
        if key not in self._splits:
            train, held = holdout(self.n_records, share, seed=seed, silo=self.silo_id)
            self._keep(key, (train, held, self.X[train], self.y[train], self.s[train]))
        return self._splits[key]

    #: At most this many splits and Rust data sets are kept (a server chooses the seeds and shares
    #: of its runs; a warm silo host must not grow with every new one).
    MAX_CACHED = 4

    def _keep(self, key: Any, value: Any) -> None:
        """Cache ``value`` under ``key``, dropping the oldest entries beyond :attr:`MAX_CACHED`."""
        self._splits[key] = value
        while len(self._splits) > self.MAX_CACHED:
            self._splits.pop(next(iter(self._splits)))

    def _silo_set(self, share: float, seed: Any, notion: Mapping[str, Any]) -> Any:
        """The Rust data set of a training split for a fairness notion (its ``core_args()``), built
        once per node."""
        key = ("silo_set", float(share), seed, tuple(sorted(notion.items())))
        if key not in self._splits:
            _, _, X, y, s = self._split(share, seed)
            self._keep(key, _core.SiloSet([(X, y, s)], n_groups=self.n_groups, n_classes=self.n_classes, **notion))
        return self._splits[key]

    def _test_shard(self) -> tuple:
        """The local test shard ``(X, y, s)`` (read once per node)."""
        if self._test is None:
            from pfair.datasets.shards import read_shard

            X, y, s, _ = read_shard(self.policy.test_path, n_groups=self.n_groups, n_classes=self.n_classes)
            self._test = (X, y, s)
        return self._test

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
        with self.policy.locked():
            ledger = self.ledger()
            out: dict[str, Any] = {"n_records": self.n_records, "n_features": int(self.X.shape[1])}
            if settings.epsilon is None or settings.p_s_source != "dp" or not settings.sends_psi:
                self._party(settings, check_budget=False, ledger=ledger)  # the settings' checks (ε None refused)
                return out
            name = settings.notion.histogram_name
            if name not in self.policy.histogram_releases:
                raise SettingsMismatch(
                    f"silo {self.silo_id}: the run asks for a histogram of s for {name[len(HISTOGRAM_PREFIX):]!r}; this "
                    f"silo releases one for {sorted(r[len(HISTOGRAM_PREFIX):] for r in self.policy.histogram_releases)} only "
                    "(node config histogram-fairness). Nothing was read or charged; add the notion to "
                    "histogram-fairness if this silo takes part in such runs, or run with public proportions p_s")
            # The silo's own price, whatever the run config names (ε, share): a server cannot buy a
            # larger histogram, nor one for a notion the silo did not agree to.
            settings = dataclasses.replace(settings, epsilon=min(ledger.epsilon, self.policy.max_run_epsilon),
                                           p_s_epsilon_share=self.policy.histogram_share)
            party = self._party(settings, check_budget=False, ledger=ledger)
            others = sorted(k for k in ledger.releases if k.startswith(HISTOGRAM_PREFIX) and k != name)
            if self.policy.noise_seed is not None and others:
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
        with self.policy.locked():
            ledger = self.ledger()
        z_h = histogram_noise_multiplier(epsilon=min(ledger.epsilon, self.policy.max_run_epsilon), share=self.policy.histogram_share,
                                         delta=ledger.delta)
        fresh = PrivacyLedger(epsilon=ledger.epsilon, delta=ledger.delta)
        return fresh.epsilon_with([histogram_event(z_h)] * len(self.policy.histogram_releases))

    def _refusal(self, party: SiloParty, rounds_per_epoch: int) -> str | None:
        """Why this silo refuses the run (its :class:`~pfair.exceptions.BudgetTooSmall` message), or None."""
        try:
            party.preflight(int(party.settings.epochs) * int(rounds_per_epoch),
                            reserve=self.policy.evaluation_reserve(party.settings, party.ledger))
        except BudgetTooSmall as exc:
            log.warning("silo %s refuses the run: %s", self.silo_id, exc)
            return f"BudgetTooSmall: {exc}"
        return None

    def plan(self, settings: SteFFLeSettings, proportions: np.ndarray, total_rounds: int, run_id: str) -> dict:
        """Calibrate this silo's noise for the run (or restore the plan of a run it already
        planned) and return the plan: its σ's, z and ε, which are public."""
        with self.policy.locked():
            return self._plan(settings, proportions, total_rounds, run_id)

    def _plan(self, settings: SteFFLeSettings, proportions: np.ndarray, total_rounds: int, run_id: str) -> dict:
        ledger = self.ledger()
        terms = self.policy.terms(settings, ledger, self.model)
        saved = self.policy.saved_plan()
        if saved is not None:
            if saved["run_id"] == run_id:
                self.policy.check_terms(saved, terms, run_id)
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
        if self.policy.noise_seed is not None and any(rid != run_id for rid in ledger.runs):
            raise SettingsMismatch(
                f"silo {self.silo_id}: its noise-seed served run(s) {sorted(ledger.runs)} already; a second run "
                "would draw the same noise under other noise scales, and two replies of one round would give "
                "the exact gradient. Give the node another noise-seed (or none) for a new run")
        party = self._party(settings, ledger=ledger)
        check_total_rounds(party.settings, int(total_rounds), silo=self.silo_id)
        plan = party.plan_rounds(np.asarray(proportions, dtype=np.float64), int(total_rounds), run_id=run_id,
                                 reserve=self.policy.evaluation_reserve(party.settings, ledger))
        record = {"run_id": run_id, "plan": plan.as_dict(), "proportions": np.asarray(proportions).tolist(),
                  "terms": terms, "total_rounds": int(total_rounds)}
        if party.keys.batch.is_secret:
            # Batches keyed by a secret (record mode; attribute mode without replacement or
            # Poisson). Every message of the run is a new process, so the run's batch key is drawn
            # once here and kept in the silo's own state: with a fresh key per message, the rounds
            # of an epoch would not be slices of one permutation, and a record could be in several
            # batches of an epoch that the ledger charges as one release.
            record["batch_key"] = new_secret().hex()
        self.policy.write_plan(record)  # readable by the silo's own user only: it may hold the batch key
        return record["plan"]

    def _planned_party(self, settings: SteFFLeSettings, run_id: str) -> SiloParty:
        """A party with the saved noise plan of run ``run_id`` adopted."""
        saved = self.policy.saved_plan()
        if saved is None:
            raise RuntimeError(f"silo {self.silo_id} has no noise plan; the server must send the plan query first")
        if saved["run_id"] != run_id:
            raise RuntimeError(f"silo {self.silo_id}: round of run {run_id!r}, but the planned run is {saved['run_id']!r}")
        ledger = self.ledger()
        self.policy.check_terms(saved, self.policy.terms(settings, ledger, self.model), run_id)
        batch_key = restore_key(bytes.fromhex(saved["batch_key"])) if "batch_key" in saved else None
        party = self._party(settings, batch_key=batch_key, ledger=ledger)
        party.adopt(NoisePlan(**saved["plan"]), np.asarray(saved["proportions"]), run_id)
        return party

    def train(self, settings: SteFFLeSettings, run_id: str, round: int, theta: np.ndarray, w: np.ndarray) -> SiloMessage:
        """The silo's reply to a round of run ``run_id``: charged first (refused past the budget,
        or if the round was answered before), then exactly the parts of a :class:`SiloMessage`."""
        with self.policy.locked():
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
        with self.policy.locked():
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
        if self.policy.test_path is None:
            return {}
        X, y, s = self._test_shard()
        theta = np.asarray(theta, dtype=np.float64)
        if self.policy.exact_evaluate:
            log.warning("silo %s: exact evaluation (allow-exact-evaluate): the server can read every test record's "
                        "s from repeated queries; not covered by the guarantee", self.silo_id)
            return self._metrics(X, y, s, theta)
        with self.policy.locked():
            ledger = self.ledger()
            st = self.policy.settings_for(settings, ledger, check_budget=False)
            saved = self.policy.saved_plan()
            if saved is None or saved["run_id"] != run_id or run_id not in ledger.runs:
                raise SettingsMismatch(f"silo {self.silo_id}: evaluation of run {run_id!r}, which is not the run this "
                                       "silo planned last; a silo evaluates the models of its own current run only")
            # Under the run's planned terms only: the protection (whether x and y are released
            # exactly) and the model are the plan's, not what this message says.
            self.policy.check_terms(saved, self.policy.terms(settings, ledger, self.model), run_id)
            self._check_trained(ledger, run_id, "an evaluation")
            done = sorted(k for k in ledger.releases if k.startswith(f"{EVALUATION_PREFIX}{run_id}:"))
            if len(done) >= self.policy.evaluations_per_run:
                raise PrivacyBudgetExceeded(
                    f"silo {self.silo_id}: run {run_id!r} had its {self.policy.evaluations_per_run} evaluation(s) "
                    "(node config evaluations-per-run); each is a release of the test shard's s")
            z = evaluation_noise_multiplier(self.policy.evaluate_epsilon, ledger.delta)
            # The stream's index counts the evaluation charges, not the kept releases: a process that
            # died between its charge and its release must not leave the next one the same stream.
            charged = sum(1 for e in ledger.events if e.name == "evaluation")
            table = mechanisms.release_histogram(
                lambda: confusion_by_group(y, np.argmax(self._predict_proba(X, theta), axis=1), s,
                                           n_groups=self.n_groups, n_classes=self.n_classes),
                ledger=ledger, event=MechanismEvent.gaussian_histogram(noise_multiplier=z, name="evaluation"),
                key=noise_key(self.policy.noise_seed), release=evaluation_release(self.silo_id, release_run(ledger, run_id), charged),
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
        edges = check_edges(edges, "edges")
        theta = np.asarray(theta, dtype=np.float64).ravel()
        if not np.all(np.isfinite(theta)):
            raise ValueError(f"silo {self.silo_id}: the model sent for a score histogram is not finite; nothing was "
                             "read or charged")
        if self.n_classes != 2:
            raise SettingsMismatch(f"silo {self.silo_id}: a score histogram is for binary labels; this federation has "
                                   f"{self.n_classes} classes")
        eps = float(epsilon)
        if not self.policy.allow_score_histogram:
            raise SettingsMismatch(f"silo {self.silo_id}: a score histogram is a release a server could ask before any "
                                   "training, up to max-run-epsilon; this silo answers none (node config "
                                   "allow-score-histogram = false, the default). Set allow-score-histogram = true on a "
                                   "silo that takes part in private post-processing. Nothing was read or charged")
        with self.policy.locked():
            ledger = self.ledger()
            cap = min(ledger.epsilon, self.policy.max_run_epsilon)
            if not (np.isfinite(eps) and 0 < eps <= cap * (1 + 1e-12)):
                raise SettingsMismatch(f"silo {self.silo_id}: a score histogram asked for epsilon={eps:g}; this silo "
                                       f"answers at most its budget and max-run-epsilon ({cap:g}). Nothing was read "
                                       "or charged")
            if self.policy.noise_seed is not None and any(e.name == SCORE_HISTOGRAM_EVENT for e in ledger.events):
                raise SettingsMismatch(f"silo {self.silo_id}: its noise-seed released a score histogram already; a "
                                       "second one under a known seed would help remove the noise. Give the node "
                                       "another noise-seed (or none)")

            # The scores read x alone: computed first, so that a θ the model cannot take is refused
            # before the charge. The counts, which read s and y, only once the release is charged.
            bins = score_bins(self._predict_proba(self.X, theta)[:, 1], edges)

            def counts() -> np.ndarray:
                return score_counts(bins, self.s, self.y, n_bins=edges.size + 1, n_groups=self.n_groups)

            table, z = release_score_histogram(counts, ledger=ledger, epsilon=eps, key=noise_key(self.policy.noise_seed),
                                               silo=self.silo_id)
        return {"histogram": table, "noise_multiplier": float(z), "n_records": self.n_records}

    def _metrics(self, X: np.ndarray, y: np.ndarray, s: np.ndarray | None, theta: np.ndarray,
                 proba: np.ndarray | None = None) -> dict[str, float]:
        """Exact metrics of θ on (X, y, s) (without s: error and loss only)."""
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

        from pfair.providers.torch import set_module_theta

        module = set_module_theta(build_module(self.model, allowed=self.policy.allow_models), theta).eval()
        shape = tuple(self.model["input_shape"] or (X.shape[1],))
        dtype = next(module.parameters()).dtype
        with torch.no_grad():
            logits = module(torch.as_tensor(X, dtype=dtype).reshape(-1, *shape))
        return torch.softmax(logits.double(), dim=1).numpy()

    def report(self) -> dict[str, Any]:
        """The ledger's public summary (budget, ε spent, runs) and whether this silo answers exact
        evaluations (``not_covered`` then says so)."""
        with self.policy.locked():
            d = self.ledger().to_dict()
        out = {k: d[k] for k in ("silo", "epsilon_budget", "delta", "epsilon_spent", "epsilon_remaining", "runs")}
        out["exact_evaluate"] = self.policy.exact_evaluate
        out["not_covered"] = (["exact evaluation of the test shard (allow-exact-evaluate)"]
                              if self.policy.exact_evaluate and self.policy.test_path is not None else [])
        if self.policy.anchor is None:
            out["not_covered"].append("a restored or emptied state directory (ledger-anchor = none)")
        return out



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
