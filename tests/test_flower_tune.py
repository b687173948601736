"""Private model selection on a loopback Flower deployment (pfair.flower.tune): a search is several
runs on the same SuperNodes, whose persistent ledgers compose them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

flwr = pytest.importorskip("flwr", reason="the flower extra is not installed (pip install 'pfair[flower]')")

import pfair  # noqa: E402
from pfair.flower.deploy import write_federation  # noqa: E402
from pfair.flower.tune import deploy_search  # noqa: E402
from pfair.privacy.calibration import composed_epsilon  # noqa: E402
from pfair.privacy.ledger import PrivacyLedger  # noqa: E402

from flower_support import data  # noqa: E402


@pytest.mark.slow
def test_a_deployed_search_composes_its_runs_on_the_nodes_ledgers_and_chooses_from_released_figures(tmp_path):
    X, y, s, silos = data()
    fed = pfair.Federation.from_arrays(X, y, sensitive_features=s, silos=silos)
    cfgs = write_federation(fed, tmp_path / "data")
    for c in cfgs:
        c["epsilon"] = 2.0
    est = pfair.SteFFLe(epsilon=2.0, epochs=2, batch_size=150, p_s=[0.5, 0.5], seed=1)
    out = deploy_search(est, {"lr_theta": [0.25, 1.0]}, cfgs, n_groups=2, n_classes=2, workdir=tmp_path / "flwr",
                        round_timeout=60, timeout=300)
    assert [r["status"] for r in out["runs"]] == ["completed"] * 2 and out["accounting"] == "composition"
    rows = out["results"]
    assert rows[0]["epsilon_target"] < rows[1]["epsilon_target"] == 2.0
    ok = [i for i, r in enumerate(rows) if r["clearly_better"]]
    if ok:
        assert out["best_index"] == min(ok, key=lambda i: rows[i]["validation_error"])
    assert out["best_params"] == {"lr_theta": [0.25, 1.0][out["best_index"]]}
    for c, reported in zip(cfgs, out["epsilon_spent"]):
        ledger = PrivacyLedger.load(Path(c["state-dir"]) / "ledger.json")
        assert len(ledger.runs) == 2  # both candidates charged to the same persistent ledger
        assert not [e for e in ledger.events if e.name.startswith("evaluation")]  # no test data read
        spent = ledger.epsilon_spent()
        assert spent == pytest.approx(reported, rel=1e-12) and 0.985 * 2.0 <= spent <= 2.0
        assert composed_epsilon(ledger.events, ledger.delta) == pytest.approx(spent, rel=1e-12)
        zs = sorted({e.noise_multiplier for e in ledger.events if e.name == "steffle_rounds"})
        assert zs[-1] / zs[0] < 1.02  # the same noise for both candidates
    np.testing.assert_array_equal(out["best"]["theta"], out["runs"][out["best_index"]]["theta"])


@pytest.mark.slow
def test_pfair_deploy_local_tune_prints_the_choice_and_the_searchs_epsilon(tmp_path, capsys, monkeypatch):
    import json

    from pfair.cli import main
    from pfair.flower.tune import DEPLOY_GRID

    monkeypatch.chdir(tmp_path)
    code = main(["deploy", "local", "--dataset", "german", "--silos", "2", "--epsilon", "2", "--epochs", "1",
                 "--batch-size", "300", "--round-timeout", "60", "--timeout", "300", "--workdir", "wd", "--tune",
                 "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    tune = out["tune"]
    assert code == 0 and tune["candidates"] == len(DEPLOY_GRID["lr_theta"]) == len(tune["results"])
    assert tune["best_params"]["lr_theta"] in DEPLOY_GRID["lr_theta"] and tune["accounting"] == "composition"
    assert out["rounds"] == 2 * 2  # two candidates of two rounds each
    for j, row in enumerate(out["privacy"]):
        ledger = PrivacyLedger.load(tmp_path / "wd" / "silos" / f"silo{j}" / "state" / "ledger.json")
        assert len(ledger.runs) == 2 and row["epsilon_spent"] == pytest.approx(ledger.epsilon_spent(), rel=1e-12)
        assert 0.985 * 2.0 <= ledger.epsilon_spent() <= 2.0
    assert out["epsilon_spent"] == tune["epsilon_search"]


def _result(status, spent):
    silos = [{"silo": j, "ledger": {"epsilon_spent": spent}, "refused": status == "refused"} for j in range(2)]
    out = {"status": status, "silos": silos, "rounds": 0 if status == "refused" else 2}
    if status == "completed":
        out.update({"theta": [0.0] * 4, "checkpoints": [], "selected_epoch": None})
    return out


def test_a_search_never_chooses_a_run_the_silos_refused(tmp_path, monkeypatch):
    """deploy_search: a candidate whose run every silo refused (status "refused": nothing trained or
    released) is not chosen, even when no candidate released figures (validation_share=0), and the
    warning names it; when every run was refused, the first refusal is the result and says so."""
    from pfair.flower import tune

    cfgs = [{"state-dir": str(tmp_path / f"s{j}"), "epsilon": 2.0} for j in range(2)]
    est = pfair.SteFFLe(epsilon=2.0, epochs=1, batch_size=150, p_s=[0.5, 0.5], seed=1, validation_share=0.0)
    for statuses, best, chosen in ((["refused", "completed"], 1, [False, True]),
                                   (["refused", "refused"], 0, [False, False])):
        monkeypatch.setattr(tune, "run_deployments",
                            lambda settings, *a, statuses=statuses, **k: [_result(st, 0.5) for st in statuses])
        out = deploy_search(est, {"lr_theta": [0.25, 1.0]}, cfgs, n_groups=2, n_classes=2, max_violation=None)
        assert out["best_index"] == best and [r["chosen"] for r in out["results"]] == chosen
        assert [r["status"] for r in out["results"]] == statuses
        assert "refused" in out["selection_warning"]
        assert out["best"]["status"] == statuses[best]
