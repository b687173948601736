"""A model you can ship (issue 37, item 1): `TablePreprocessor` reproduces the loaders' features,
`pfair.save_model` / `pfair.load_model` round-trip SteFFLe and DeepSteFFLe bit for bit, `pfair
train --save-model` and `pfair predict` do the same from the shell, and the file refuses what it
must (a newer format, pickled arrays, a module factory the caller did not allow)."""

from __future__ import annotations

import io
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pfair
from pfair.cli import main
from pfair.datasets import TablePreprocessor, load_csv
from pfair.model_file import FORMAT_VERSION, load_model, save_model


def _table(path: Path, n: int = 900, seed: int = 0) -> pd.DataFrame:
    """Numeric (one with missing values), categorical (text and bool) columns, a label, s, an id."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "id": np.arange(n), "age": rng.integers(20, 70, n), "income": rng.normal(50, 15, n).round(2),
        "purpose": rng.choice(["car", "home", "study"], n), "owner": rng.choice([True, False], n),
        "sex": rng.choice(["F", "M"], n)})
    frame.loc[rng.choice(n, 30, replace=False), "income"] = np.nan  # 3.3%: dropped with a warning
    score = frame["income"].fillna(50) - 50 + 8 * (frame["purpose"] == "home") + rng.normal(0, 6, n)
    frame["default"] = np.where(score > 0, "yes", "no")
    frame.to_csv(path, index=False)
    return frame


def _load(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_csv(path, label="default", positive_label="yes", sensitive="sex", drop=["id"])


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("model_file") / "loans.csv"
    _table(path)
    return path, _load(path)


@pytest.fixture(scope="module")
def fitted(table):
    _, ds = table
    fed = pfair.Federation.partition(ds, 3, by="age", heterogeneity=0.5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pfair.SteFFLe(lam=1.0, epsilon=1.0, epochs=4).fit(fed)


# --------------------------------------------------------------------------------------------
# The preprocessing as a transformer
# --------------------------------------------------------------------------------------------


def test_the_preprocessor_makes_x_train_and_x_test_bit_for_bit_from_the_rows_they_came_from(table):
    path, ds = table
    raw = pd.read_csv(path)
    pre = ds.preprocessor
    assert isinstance(pre, TablePreprocessor)
    assert pre.numeric == ["age", "income"] and pre.categorical == ["purpose", "owner"]
    assert pre.categories_ == [["car", "home", "study"], [False, True]]
    assert list(pre.get_feature_names_out()) == list(ds.feature_names)
    assert np.array_equal(pre.transform(raw.iloc[ds.train_index]), ds.X_train)
    assert np.array_equal(pre.transform(raw.iloc[ds.test_index]), ds.X_test)
    # the statistics are the training rows' (population std), not the whole table's
    train = raw.iloc[ds.train_index]
    assert pre.mean_[1] == pytest.approx(train["income"].mean(), rel=1e-12)
    assert pre.scale_[1] == pytest.approx(train["income"].std(ddof=0), rel=1e-12)
    assert pre.mean_[1] != pytest.approx(raw["income"].mean(), rel=1e-6)


def test_a_fresh_preprocessor_fits_like_a_scikit_learn_transformer():
    from sklearn.base import clone

    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "c": ["b", "a", "b", "b"], "y": [0, 1, 0, 1]})
    pre = TablePreprocessor(numeric=["x"], categorical=["c"])
    X = pre.fit_transform(frame)
    scale = np.std([1.0, 2.0, 3.0, 4.0])
    assert np.allclose(X, [[(1 - 2.5) / scale, 0, 1], [(2 - 2.5) / scale, 1, 0], [(3 - 2.5) / scale, 0, 1],
                           [(4 - 2.5) / scale, 0, 1]])
    assert clone(pre).get_params() == pre.get_params()
    with pytest.raises(TypeError, match="pandas DataFrame"):
        pre.transform(frame.to_numpy())
    with pytest.raises(ValueError, match=r"column\(s\) \['c'\] are missing"):
        pre.transform(frame[["x"]])
    with pytest.raises(ValueError, match="numeric column.*'x'.*non-numbers"):
        pre.transform(frame.assign(x=["1", "2", "3", "x"]))


def test_new_rows_an_unseen_category_is_refused_or_an_all_zero_block(table, fitted):
    path, ds = table
    new = pd.read_csv(path).dropna().head(4).copy()
    new.loc[new.index[1], "purpose"] = "boat"
    with pytest.raises(ValueError, match=r"column 'purpose' has 1 row\(s\) with a category the model was not trained "
                                         r"on: \['boat'\].*handle_unknown='ignore'.*--unknown-category ignore"):
        ds.preprocessor.transform(new)
    pre = ds.preprocessor.set_params(handle_unknown="ignore")
    try:
        X = pre.transform(new)
    finally:
        pre.set_params(handle_unknown="error")
    block = [ds.feature_names.index(f"purpose={v}") for v in ("car", "home", "study")]
    assert X[1, block].tolist() == [0.0, 0.0, 0.0] and X[[0, 2, 3]][:, block].sum(axis=1).tolist() == [1.0] * 3
    # the unknown column adds nothing to the score: the logit is θ's on the other columns
    d = ds.n_features
    logit = X[1] @ fitted.theta_[:d] + fitted.theta_[d]
    assert fitted.predict_proba(X[1:2])[0, 1] == pytest.approx(1 / (1 + np.exp(-logit)), rel=1e-12)


def test_new_rows_with_a_missing_value_are_refused_naming_the_column(table):
    path, ds = table
    raw = pd.read_csv(path)
    with pytest.raises(ValueError, match=r"30 of 900 rows have a missing value in a feature column \('income' 30; "
                                         r"rows .*pfair does not impute"):
        ds.preprocessor.transform(raw)


# --------------------------------------------------------------------------------------------
# SteFFLe from Python
# --------------------------------------------------------------------------------------------


def test_a_steffle_round_trips_bit_for_bit_with_its_preprocessing_settings_and_report(table, fitted, tmp_path):
    path, ds = table
    file = save_model(fitted, tmp_path / "model.pfair", dataset=ds)
    names = sorted(zipfile.ZipFile(file).namelist())
    assert names == ["arrays/W.npy", "arrays/preprocessor_mean.npy", "arrays/preprocessor_scale.npy",
                     "arrays/theta.npy", "model.json"]
    saved = load_model(file)
    est = saved.estimator
    assert type(est) is pfair.SteFFLe and est.get_params() == fitted.get_params()
    assert np.array_equal(est.theta_, fitted.theta_) and np.array_equal(est.W_, fitted.W_)
    assert np.array_equal(est.predict_proba(ds.X_test), fitted.predict_proba(ds.X_test))
    assert np.array_equal(est.predict(ds.X_test), fitted.predict(ds.X_test))
    assert np.array_equal(est.coef_, fitted.coef_) and np.array_equal(est.intercept_, fitted.intercept_)
    assert est.lam_ == fitted.lam_ and est.selected_epoch_ == fitted.selected_epoch_
    pd.testing.assert_frame_equal(pd.DataFrame(est.privacy_report_), pd.DataFrame(fitted.privacy_report_),
                                  check_dtype=False)
    pd.testing.assert_frame_equal(est.checkpoints_, fitted.checkpoints_, check_dtype=False)
    # From the table's rows: the same features, predictions in the original label values.
    rows = pd.read_csv(path).iloc[ds.test_index]
    assert np.array_equal(saved.transform(rows), ds.X_test)
    assert saved.label_names == ["no", "yes"] and saved.group_names == ["F", "M"] and saved.sensitive == "sex"
    assert saved.predict(rows).tolist() == [ds.label_names[c] for c in fitted.predict(ds.X_test)]
    proba = saved.predict_proba(rows)
    assert list(proba.columns) == ["no", "yes"] and np.array_equal(proba.to_numpy(), fitted.predict_proba(ds.X_test))
    assert saved.info["format_version"] == FORMAT_VERSION and saved.info["pfair_version"] == pfair.__version__


def test_the_file_refuses_a_newer_format_pickled_arrays_and_other_files(table, fitted, tmp_path):
    _, ds = table
    good = save_model(fitted, tmp_path / "model.pfair", dataset=ds)

    def rewrite(target: Path, edit_manifest=None, extra=None) -> Path:
        with zipfile.ZipFile(good) as src, zipfile.ZipFile(target, "w") as dst:
            for name in src.namelist():
                data = src.read(name)
                if name == "model.json" and edit_manifest:
                    manifest = json.loads(data)
                    edit_manifest(manifest)
                    data = json.dumps(manifest).encode()
                dst.writestr(name, (extra or {}).get(name, data))
        return target

    newer = rewrite(tmp_path / "newer.pfair", lambda m: m.update(format_version=FORMAT_VERSION + 1,
                                                                 pfair_version="9.0.0"))
    with pytest.raises(ValueError, match=rf"written by pfair 9.0.0 in model-file format {FORMAT_VERSION + 1}; this "
                                         rf"pfair \(.*\) reads formats up to {FORMAT_VERSION}: upgrade pfair"):
        load_model(newer)
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    pickled = rewrite(tmp_path / "pickled.pfair", extra={"arrays/theta.npy": buf.getvalue()})
    with pytest.raises(ValueError, match="arrays/theta.npy' is not a plain numeric array"):
        load_model(pickled)
    with pytest.raises(ValueError, match="not a pfair model file"):
        load_model(rewrite(tmp_path / "other.pfair", lambda m: m.update(format="something")))
    (tmp_path / "model.pkl").write_bytes(b"\x80\x04not a zip")
    with pytest.raises(ValueError, match="not a zip archive.*pickle or joblib"):
        load_model(tmp_path / "model.pkl")
    with pytest.raises(ValueError, match="does not exist"):
        load_model(tmp_path / "missing.pfair")
    with pytest.raises(ValueError, match="not fitted yet"):
        save_model(pfair.SteFFLe(), tmp_path / "unfitted.pfair")
    # the CLI says the same, without a traceback
    assert main(["predict", "--model", str(newer), "--csv", str(table[0])]) == 2


# --------------------------------------------------------------------------------------------
# SteFFLe from the command line
# --------------------------------------------------------------------------------------------


def test_pfair_train_save_model_and_pfair_predict_give_the_models_predictions(table, tmp_path, capsys, monkeypatch):
    path, ds = table
    monkeypatch.chdir(tmp_path)
    data = ["--csv", str(path), "--label", "default", "--positive-label", "yes", "--sensitive", "sex", "--drop", "id",
            "--silos", "2", "--epochs", "3"]
    assert main(["train", *data, "--save-model", "cli.pfair", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["model_file"] == "cli.pfair"
    saved = load_model("cli.pfair")
    # the file holds the model the run evaluated: its test error, from the same test rows
    pred = saved.estimator.predict(ds.X_test)
    assert float(np.mean(pred != ds.y_test)) == result["test_error"]
    assert saved.estimator.epochs == 3 and saved.info["metadata"]["command"] == "pfair train"
    assert saved.privacy_report["epsilon_spent"].max() == pytest.approx(result["epsilon_spent"], rel=1e-12)
    # pfair predict on new rows: every row, in file order, the labels and probabilities of the model
    new = pd.read_csv(path).dropna().iloc[::7]
    new.to_csv("new.csv", index=False)
    assert main(["predict", "--model", "cli.pfair", "--csv", "new.csv", "--out", "preds.csv", "--proba",
                 "--with", "id"]) == 0
    assert f"wrote {len(new):,} predictions to preds.csv" in capsys.readouterr().out
    # round_trip: pandas < 3's default parser may read a written float one unit in the last place off
    preds = pd.read_csv("preds.csv", float_precision="round_trip")
    assert list(preds.columns) == ["id", "prediction", "proba_no", "proba_yes"]
    assert preds["id"].tolist() == new["id"].tolist()
    assert preds["prediction"].tolist() == saved.predict(new).tolist()
    assert np.array_equal(preds[["proba_no", "proba_yes"]].to_numpy(), saved.predict_proba(new).to_numpy())
    # rows with a missing value: refused, or (--dropna) an empty prediction
    assert main(["predict", "--model", "cli.pfair", "--csv", str(path)]) == 2
    assert "30 of 900 rows have a missing value" in capsys.readouterr().err
    assert main(["predict", "--model", "cli.pfair", "--csv", str(path), "--out", "all.csv", "--dropna"]) == 0
    everything = pd.read_csv("all.csv")
    raw = pd.read_csv(path)
    assert len(everything) == 900 and everything["prediction"].isna().tolist() == raw["income"].isna().tolist()


# --------------------------------------------------------------------------------------------
# DeepSteFFLe
# --------------------------------------------------------------------------------------------


def tiny_net(n_features: int, n_classes: int):
    """A module factory outside pfair (this test module), for the allow_models rule."""
    from pfair.torch.models import mlp

    return mlp(n_features, n_classes, hidden=[4])


def test_a_deep_steffle_round_trips_bit_for_bit_through_its_named_factory(table, tmp_path):
    pytest.importorskip("torch")
    from pfair.torch import DeepSteFFLe
    from pfair.torch.models import mlp

    path, ds = table
    fed = pfair.Federation.partition(ds, 2, by="age", heterogeneity=0.0, seed=0)
    kwargs = {"n_features": ds.n_features, "n_classes": 2, "hidden": [8]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        deep = DeepSteFFLe(mlp(**kwargs), epochs=2, init_seed=0, epsilon=2.0).fit(fed, ledgers="new")
    with pytest.raises(ValueError, match="needs module_factory='package.module:function'"):
        save_model(deep, tmp_path / "deep.pfair", dataset=ds)
    with pytest.raises(ValueError, match="not the architecture it was trained with"):
        save_model(deep, tmp_path / "deep.pfair", dataset=ds, module_factory="pfair.torch.models:mlp",
                   factory_kwargs={**kwargs, "hidden": [9]})
    file = save_model(deep, tmp_path / "deep.pfair", dataset=ds, module_factory="pfair.torch.models:mlp",
                      factory_kwargs=kwargs)
    saved = load_model(file)
    est = saved.estimator
    assert type(est) is DeepSteFFLe and est.epochs == 2 and est.init_seed == 0
    assert np.array_equal(est.theta_, deep.theta_)
    assert np.array_equal(est.predict_proba(ds.X_test), deep.predict_proba(ds.X_test))
    rows = pd.read_csv(path).iloc[ds.test_index]
    assert np.array_equal(saved.predict_proba(rows).to_numpy(), deep.predict_proba(ds.X_test))
    for key, tensor in deep.module_.state_dict().items():
        assert np.array_equal(est.module_.state_dict()[key].numpy(), tensor.numpy())
    # A factory outside pfair is built only when the caller allows it.
    own = {"n_features": ds.n_features, "n_classes": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other = DeepSteFFLe(tiny_net(**own), epochs=1, init_seed=0, epsilon=2.0).fit(fed)
    save_model(other, tmp_path / "own.pfair", dataset=ds, module_factory=f"{__name__}:tiny_net", factory_kwargs=own)
    with pytest.raises(ValueError, match=rf"rebuilds its module with '{__name__}:tiny_net', which "
                                         r"allow_models='pfair.torch.models:\*' does not allow"):
        load_model(tmp_path / "own.pfair")
    allowed = load_model(tmp_path / "own.pfair", allow_models=f"{__name__}:*")
    assert np.array_equal(allowed.estimator.predict_proba(ds.X_test), other.predict_proba(ds.X_test))
    rows.to_csv(tmp_path / "rows.csv", index=False)
    assert main(["predict", "--model", str(tmp_path / "own.pfair"), "--csv", str(tmp_path / "rows.csv"),
                 "--out", str(tmp_path / "p.csv"), "--allow-models", f"{__name__}:*", "--proba"]) == 0
    # round_trip: pandas 2.0's default parser reads a %.17g float one unit in the last place off.
    written = pd.read_csv(tmp_path / "p.csv", float_precision="round_trip")[["proba_no", "proba_yes"]].to_numpy()
    assert np.array_equal(written, other.predict_proba(ds.X_test))


# --------------------------------------------------------------------------------------------
# A Flower deployment's model
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pfair_deploy_local_save_model_writes_the_deployed_theta(tmp_path, capsys, monkeypatch):
    pytest.importorskip("flwr")
    monkeypatch.chdir(tmp_path)
    args = ["deploy", "local", "--dataset", "german", "--silos", "2", "--epsilon", "2", "--epochs", "1",
            "--batch-size", "300", "--round-timeout", "60", "--timeout", "300", "--save-model", "deployed.pfair",
            "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    saved = load_model("deployed.pfair")
    ds = pfair.datasets.load("german")
    assert float(np.mean(saved.estimator.predict(ds.X_test) != ds.y_test)) == out["test_error"]
    assert saved.info["metadata"]["command"] == "pfair deploy local" and saved.estimator.batch_size == 300
    assert saved.privacy_report["epsilon_spent"].tolist() == [row["epsilon_spent"] for row in out["privacy"]]
    assert saved.label_names == ds.label_names and saved.preprocessor is not None
