"""`TablePreprocessor`: the feature preprocessing of `load_csv` (and of every bundled loader) as a
scikit-learn transformer, so that the encoding and scaling a model was trained with can be applied
to new rows.

Fitted on the training rows of a table it learns, for the columns it was given:

* numeric columns: the mean and the (population) standard deviation of the training rows; a
  column becomes ``(v - mean_) / scale_`` (a constant column gets scale 1: it is only centred);
* categorical columns: the categories (``categories="auto"``: the sorted distinct values of the
  rows it is fitted on; `load_csv` passes those of the whole table, so that a category met only in
  the test split still has its column); a column becomes one 0/1 column per category,
  ``"<column>=<category>"``.

Numeric columns come first, then the categorical blocks in the order given: the layout of
``Dataset.X_train``. ``transform`` reproduces ``X_train`` and ``X_test`` bit for bit from the rows
they came from (tests/test_model_file.py).

New rows (``transform``): every feature column must be there (others, such as the label, the
sensitive attribute or an id, are ignored); a missing value in a feature column is refused, naming
the columns (pfair does not impute); a category the preprocessor never saw is refused
(``handle_unknown="error"``, the default, naming the column and the values) or encoded as an
all-zero block (``handle_unknown="ignore"``): the column then adds nothing to the model's score, as
for scikit-learn's ``OneHotEncoder(handle_unknown="ignore")``.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np
import pandas as pd
from pandas.api import types as ptypes
from sklearn.base import BaseEstimator, TransformerMixin

from pfair.exceptions import NotFittedError

__all__ = ["TablePreprocessor", "category_order"]

HANDLE_UNKNOWN = ("error", "ignore")


def category_order(values: pd.Series) -> list:
    """The categories of a column, in the order every loader encodes them: the sorted distinct
    non-missing values (numbers numerically, anything else by its string form when the values do
    not compare), as Python scalars."""
    uniques = pd.unique(values.dropna())
    try:
        order = sorted(uniques)
    except TypeError:  # mixed types: fall back to the string form
        order = sorted(uniques, key=str)
    return [v.item() if isinstance(v, np.generic) else v for v in order]


def _show(values: Sequence, limit: int = 5) -> str:
    values = list(values)
    more = f" and {len(values) - limit} more" if len(values) > limit else ""
    return f"{values[:limit]!r}{more}"


class TablePreprocessor(TransformerMixin, BaseEstimator):
    """Standardise numeric columns and one-hot encode categorical ones, with statistics learned on
    training rows; the preprocessing of :func:`pfair.datasets.load_csv` (``Dataset.preprocessor``).

    Parameters
    ----------
    numeric : list of str
        Columns standardised with the training rows' mean and standard deviation.
    categorical : list of str
        Columns one-hot encoded, one 0/1 column per category.
    categories : "auto" or list of lists
        ``"auto"``: each categorical column's sorted distinct values in the rows ``fit`` sees;
        otherwise one list of categories per ``categorical`` column, in order (what `load_csv`
        passes: the categories of the whole table).
    handle_unknown : {"error", "ignore"}
        What ``transform`` does with a category not among ``categories_``: ``"error"`` (default)
        raises a ``ValueError`` naming the column and the values; ``"ignore"`` encodes it as an
        all-zero block, so that column adds nothing to the model's score for that row.

    Attributes
    ----------
    feature_names_in_ : ndarray of the input columns (numeric, then categorical)
    n_features_in_ : int, their number
    categories_ : list of lists, the categories of each categorical column
    mean_, scale_ : float64 arrays of the numeric columns' training mean and standard deviation
    n_features_out_ : int, the number of columns of the transformed matrix
    """

    def __init__(self, numeric: Sequence[str] = (), categorical: Sequence[str] = (),
                 categories: Union[str, Sequence[Sequence[Any]]] = "auto", handle_unknown: str = "error") -> None:
        self.numeric = numeric
        self.categorical = categorical
        self.categories = categories
        self.handle_unknown = handle_unknown

    # ------------------------------------------------------------------ fit
    def fit(self, X: pd.DataFrame, y: Any = None) -> "TablePreprocessor":
        """Learn the numeric columns' mean and standard deviation from the rows of ``X`` (the
        training rows), and the categories (``categories="auto"``) from them too."""
        numeric, categorical = list(self.numeric), list(self.categorical)
        overlap = sorted(set(numeric) & set(categorical))
        if overlap:
            raise ValueError(f"numeric and categorical: column(s) {overlap!r} are in both")
        self._check_handle_unknown()
        frame = self._frame(X, numeric + categorical, "fit")
        if isinstance(self.categories, str):
            if self.categories != "auto":
                raise ValueError(f"categories must be 'auto' or one list per categorical column, got {self.categories!r}")
            categories = [category_order(frame[c]) for c in categorical]
        else:
            categories = [list(cats) for cats in self.categories]
            if len(categories) != len(categorical):
                raise ValueError(f"categories: {len(categories)} lists for {len(categorical)} categorical columns")
        values = self._numeric_values(frame, numeric, "fit")
        if values.shape[0] == 0:
            raise ValueError("fit: X has no rows")
        self.feature_names_in_ = np.asarray(numeric + categorical, dtype=object)
        self.n_features_in_ = len(numeric) + len(categorical)
        self.categories_ = categories
        self.n_features_out_ = len(numeric) + sum(len(c) for c in categories)
        # The statistics are reduced over the numeric block of a full-width matrix, as the loaders
        # always computed them: numpy sums a strided block in another order than a contiguous one,
        # and the last bits of the mean would differ from the X_train every earlier result used.
        block = np.zeros((values.shape[0], self.n_features_out_), dtype=np.float64)
        block[:, :len(numeric)] = values
        self.mean_ = block[:, :len(numeric)].mean(axis=0)
        std = block[:, :len(numeric)].std(axis=0)
        std[~(std > 0)] = 1.0
        self.scale_ = std
        return self

    def _check_handle_unknown(self) -> None:
        if self.handle_unknown not in HANDLE_UNKNOWN:
            raise ValueError(f"handle_unknown must be one of {HANDLE_UNKNOWN}, got {self.handle_unknown!r}")

    @staticmethod
    def _frame(X: Any, columns: list, where: str) -> pd.DataFrame:
        if not isinstance(X, pd.DataFrame):
            raise TypeError(f"{where}: X must be a pandas DataFrame with the columns {columns!r} "
                            f"(e.g. pandas.read_csv(path)), got {type(X).__name__}")
        missing = [c for c in columns if c not in X.columns]
        if missing:
            raise ValueError(f"{where}: column(s) {missing!r} are missing; the model's features are made from "
                             f"{columns!r} (other columns are ignored)")
        return X

    @staticmethod
    def _numeric_values(frame: pd.DataFrame, numeric: list, where: str) -> np.ndarray:
        bad = [c for c in numeric if not ptypes.is_numeric_dtype(frame[c]) or ptypes.is_bool_dtype(frame[c])]
        if bad:
            examples = {c: pd.unique(frame[c].dropna())[:3].tolist() for c in bad}
            raise ValueError(f"{where}: numeric column(s) {bad!r} hold non-numbers (e.g. {examples!r}); the model "
                             "was trained with these columns as numbers")
        return frame[numeric].to_numpy(dtype=np.float64) if numeric else np.zeros((len(frame), 0))

    # ------------------------------------------------------------------ transform
    def _check_fitted(self) -> None:
        if not hasattr(self, "mean_"):
            raise NotFittedError("this TablePreprocessor is not fitted yet; call fit first")

    def transform(self, X: pd.DataFrame) -> np.ndarray:
        """The feature matrix of the rows of ``X`` (float64, ``n × n_features_out_``): the numeric
        columns standardised with the training statistics, then the one-hot blocks."""
        self._check_fitted()
        self._check_handle_unknown()
        numeric, categorical = list(self.numeric), list(self.categorical)
        frame = self._frame(X, numeric + categorical, "transform")
        used = frame[numeric + categorical]
        missing = used.isna()
        if missing.to_numpy().any():
            counts = missing.sum(axis=0)
            counts = counts[counts > 0]
            rows = np.flatnonzero(missing.any(axis=1).to_numpy())
            per_column = ", ".join(f"{c!r} {int(k):,}" for c, k in counts.items())
            raise ValueError(f"transform: {rows.size:,} of {len(frame):,} rows have a missing value in a feature "
                             f"column ({per_column}; rows {_show(rows.tolist())}, 0-based); pfair does not impute: "
                             f"drop those rows (frame.dropna(subset={list(counts.index)!r})) or fill them first")
        d_num = len(numeric)
        X_out = np.zeros((len(frame), self.n_features_out_), dtype=np.float64)
        if d_num:
            X_out[:, :d_num] = self._numeric_values(frame, numeric, "transform")
        offset = d_num
        rows = np.arange(len(frame))
        for c, cats in zip(categorical, self.categories_):
            codes = pd.Index(cats).get_indexer(frame[c]).astype(np.int64)  # -1: not a known category
            unknown = codes < 0
            if unknown.any() and self.handle_unknown == "error":
                values = pd.unique(frame[c][unknown])
                raise ValueError(
                    f"transform: column {c!r} has {int(unknown.sum()):,} row(s) with a category the model was not "
                    f"trained on: {_show(values.tolist())} (known: {_show(cats, 10)}). Either drop or recode those "
                    "rows, or encode an unknown category as an all-zero block (the column then adds nothing to the "
                    "score): handle_unknown='ignore' (pfair predict --unknown-category ignore)")
            known = ~unknown
            X_out[rows[known], offset + codes[known]] = 1.0
            offset += len(cats)
        if d_num:
            X_out[:, :d_num] = (X_out[:, :d_num] - self.mean_) / self.scale_
        return X_out

    def get_feature_names_out(self, input_features: Optional[Sequence[str]] = None) -> np.ndarray:
        """``numeric`` then ``"<column>=<category>"`` for every category, as ``Dataset.feature_names``."""
        self._check_fitted()
        names = list(self.numeric)
        for c, cats in zip(self.categorical, self.categories_):
            names.extend(f"{c}={v}" for v in cats)
        return np.asarray(names, dtype=object)

    # ------------------------------------------------------------------ the model file
    def to_dict(self) -> tuple[dict, dict[str, np.ndarray]]:
        """``(json, arrays)``: the parameters and categories as JSON values, the statistics as
        arrays (how :func:`pfair.save_model` stores a fitted preprocessor)."""
        self._check_fitted()
        state = {"numeric": list(self.numeric), "categorical": list(self.categorical),
                 "categories": [list(c) for c in self.categories_], "handle_unknown": self.handle_unknown}
        return state, {"mean": np.asarray(self.mean_, dtype=np.float64),
                       "scale": np.asarray(self.scale_, dtype=np.float64)}

    @classmethod
    def from_dict(cls, state: dict, arrays: dict[str, np.ndarray]) -> "TablePreprocessor":
        """The fitted preprocessor :meth:`to_dict` described."""
        pre = cls(numeric=list(state["numeric"]), categorical=list(state["categorical"]),
                  categories=[list(c) for c in state["categories"]], handle_unknown=state["handle_unknown"])
        mean, scale = np.asarray(arrays["mean"], dtype=np.float64), np.asarray(arrays["scale"], dtype=np.float64)
        if mean.shape != (len(pre.numeric),) or scale.shape != mean.shape:
            raise ValueError(f"preprocessor: {mean.shape[0]} means for {len(pre.numeric)} numeric columns")
        pre.feature_names_in_ = np.asarray(pre.numeric + pre.categorical, dtype=object)
        pre.n_features_in_ = len(pre.feature_names_in_)
        pre.categories_ = pre.categories
        pre.mean_, pre.scale_ = mean, scale
        pre.n_features_out_ = len(pre.numeric) + sum(len(c) for c in pre.categories_)
        return pre
