"""The drift guard (dive_core/compress/drift.py): fit statistics in the record, the report of
dive-compress per input set, its thresholds."""

import json

import numpy as np
import pytest
import torch

from dive_core import compress as C
from dive_core.compress import drift
from dive_core.methods import Method, new_method
from dive_core.training import FitData, TrainLog
from dive_core.vectors import VectorWriter
from synthetic import make_problem


@pytest.fixture(scope="module")
def problem():
    torch.set_num_threads(1)
    return make_problem()


def fitted(problem, type_name="pca", hp=None):
    m = new_method(type_name, problem.d, problem.k, hp or {}, 0)
    m.fit(problem.train, TrainLog(), progress=False)
    m.meta["fit_statistics"] = drift.fit_statistics(m, problem.train.docs)
    return m


def test_reconstruction_errors_are_the_distances_to_what_each_document_map_keeps(problem):
    """PCA: the residual off the k axes; truncation: the dropped coordinates; hand-checked on rows."""
    x = torch.from_numpy(problem.docs[:5])
    pca = fitted(problem)
    r = x - pca.mean
    want = (r - r @ pca.components @ pca.components.T).norm(dim=1)
    assert torch.allclose(pca.reconstruction_error(x), want)
    t = new_method("truncate", problem.d, problem.k, {}, 0)
    assert torch.allclose(t.reconstruction_error(x), x[:, problem.k:].norm(dim=1))
    assert new_method("dive", problem.d, problem.k, {**_dive_hp()}, 0).reconstruction_error(x) is None


def _dive_hp():
    from test_export import configured

    return configured("dive")


def test_fit_statistics_hold_the_fitted_documents_exactly(problem):
    m = fitted(problem)
    st = m.meta["fit_statistics"]
    codes = m.compress(problem.train.docs.numpy())
    assert st["n"] == len(codes)
    assert np.array_equal(np.asarray(st["code_min"], np.float32), codes.min(0))
    assert np.array_equal(np.asarray(st["code_max"], np.float32), codes.max(0))
    assert np.allclose(st["mean"], problem.train.docs.numpy().mean(0), atol=1e-6)
    err = m.reconstruction_error(problem.train.docs).numpy()
    assert st["reconstruction_error"]["q50"] == pytest.approx(float(np.quantile(err, 0.5)))


def test_the_fitted_documents_raise_no_warning_and_foreign_ones_do(problem):
    m = fitted(problem)
    same = drift.DriftMonitor(m, m.meta["fit_statistics"])
    x = problem.train.docs.numpy() * 3.0  # raw: the monitor normalises
    same.update(x, m.compress(problem.train.docs.numpy()))
    rep = same.report()
    assert rep["outside_rows_share"] == 0 and rep["outside_values_share"] == 0
    assert rep["reconstruction_error"]["median_ratio"] == pytest.approx(1.0, abs=1e-5)
    assert rep["mean_shift"] < 1e-6 and rep["warnings"] == []
    foreign = np.random.default_rng(1).standard_normal((200, problem.d)).astype(np.float32)  # off the subspace
    other = drift.DriftMonitor(m, m.meta["fit_statistics"])
    other.update(foreign, m.compress(foreign / np.linalg.norm(foreign, axis=1, keepdims=True)))
    rep = other.report()
    assert rep["reconstruction_error"]["median_ratio"] > drift.THRESHOLDS["reconstruction_median_ratio"]
    assert any("median reconstruction error" in w for w in rep["warnings"])


def test_the_share_outside_the_ranges_is_counted_per_value_and_per_row():
    """Hand-built: ranges [0, 1] on 2 coordinates; codes (0.5, 0.5), (2, 0.5), (-1, 3): 1 of 3 rows
    inside, 3 of 6 values outside (over the 1% threshold: a warning)."""

    class Stub:
        k, meta, device = 2, {}, "cpu"

    stats = {"n": 10, "mean": [0.0, 0.0], "code_min": [0.0, 0.0], "code_max": [1.0, 1.0], "reconstruction_error": None}
    mon = drift.DriftMonitor(Stub(), stats)
    mon.update(np.ones((3, 2), np.float32), np.array([[0.5, 0.5], [2, 0.5], [-1, 3]], np.float32))
    rep = mon.report()
    assert rep["outside_rows_share"] == pytest.approx(2 / 3) and rep["outside_values_share"] == pytest.approx(0.5)
    assert len(rep["warnings"]) == 1 and "SQ8 calibrated on the fitted documents would saturate" in rep["warnings"][0]


def test_dive_compress_reports_drift_per_input_and_writes_it(problem, tmp_path, capsys):
    m = fitted(problem)
    m.save(tmp_path / "m.pt")
    assert Method.load(tmp_path / "m.pt").meta["fit_statistics"] == m.meta["fit_statistics"]
    rng = np.random.default_rng(2)
    for name, x in (("known", problem.train.docs.numpy()), ("foreign", rng.standard_normal((100, problem.d)))):
        with VectorWriter(tmp_path / f"{name}.npy", len(x), problem.d) as w:
            w.write([f"{name}{i}" for i in range(len(x))], np.asarray(x, np.float32))
        rc = C.main([str(tmp_path / "m.pt"), str(tmp_path / f"{name}.npy"), str(tmp_path / f"{name}-out.npy"),
                     "--drift-report", str(tmp_path / f"{name}.json"), "--quiet"])
        assert rc == 0
    err = capsys.readouterr().err
    assert "known.npy (300 vectors, document side) against the fit's 300 documents: 0.00% of vectors" in err
    head, tail = err.split(f"drift of {tmp_path / 'foreign.npy'}")
    assert "WARNING" not in head and "WARNING: median reconstruction error" in tail
    known = json.loads((tmp_path / "known.json").read_text())[0]
    foreign = json.loads((tmp_path / "foreign.json").read_text())[0]
    assert known["warnings"] == [] and foreign["warnings"]
    # the report changes nothing in the output
    out = C.decode(tmp_path / "known-out.npy")[1]
    assert np.allclose(out, m.compress(problem.train.docs.numpy()), atol=1e-6)


def test_the_mean_shift_is_measured_against_sampling_noise():
    """Hand-built: the fit's mean (0, 0) and total variance 1; inputs whose normalised mean is (1, 0):
    shift 1, z = 1 / sqrt(1 / n): 2 for 4 vectors (no warning), 4 for 16 (a warning, threshold 3)."""

    class Stub:
        k, meta, device = 2, {}, "cpu"

    stats = {"n": 10, "mean": [0.0, 0.0], "total_variance": 1.0, "code_min": [-1.0, -1.0], "code_max": [1.0, 1.0],
             "reconstruction_error": None}
    for n, z, warned in ((4, 2.0, False), (16, 4.0, True)):
        mon = drift.DriftMonitor(Stub(), stats)
        x = np.tile(np.array([[5.0, 0.0]], np.float32), (n, 1))  # raw: normalised to (1, 0)
        mon.update(x, np.zeros((n, 2), np.float32))
        rep = mon.report()
        assert rep["mean_shift"] == pytest.approx(1.0) and rep["mean_shift_z"] == pytest.approx(z)
        assert any("they come from elsewhere" in w for w in rep["warnings"]) == warned


def test_fit_statistics_total_variance_is_the_trace_of_the_covariance(problem):
    m = fitted(problem)
    x = problem.train.docs.numpy().astype(np.float64)
    assert m.meta["fit_statistics"]["total_variance"] == pytest.approx(x.var(0).sum(), rel=1e-6)


def test_the_reconstruction_test_is_calibrated_on_documents_the_map_never_saw(problem):
    """Split-half calibration, by hand: a twin of the document map fitted on the seeded half the record
    names; its median error on the other half over that on its own half is the recorded ratio, and the
    warning compares an input's median with the fit's times that ratio."""
    from test_export import configured

    ae = fitted(problem, "autoencoder", configured("autoencoder"))  # the configured hyperparameters
    cal = ae.meta["fit_statistics"]["reconstruction_heldout"]
    x = problem.train.docs.numpy()
    order = np.random.default_rng(0 + drift.HELDOUT_SEED_OFFSET).permutation(len(x))
    own, other = np.sort(order[: len(x) // 2]), np.sort(order[len(x) // 2:])
    twin = new_method("autoencoder", problem.d, problem.k, ae.hp, 0)
    twin.fit(FitData.documents(x[own]), TrainLog(), progress=False)
    q = lambda rows: float(np.quantile(twin.reconstruction_error(torch.from_numpy(rows)).detach().numpy(), 0.5))  # noqa: E731
    assert (cal["n_fit"], cal["n_heldout"]) == (len(own), len(other))
    assert cal["q50_fit"] == pytest.approx(q(x[own]), rel=1e-5) and cal["q50_heldout"] == pytest.approx(q(x[other]),
                                                                                                        rel=1e-5)
    assert cal["median_ratio"] == pytest.approx(cal["q50_heldout"] / cal["q50_fit"])
    # the calibration reseeds in a preserved scope: the caller's generators do not move
    pca = fitted(problem)
    torch.manual_seed(5)
    before = torch.rand(3)
    torch.manual_seed(5)
    assert drift.heldout_calibration(pca, x)["median_ratio"] > 0
    assert torch.equal(torch.rand(3), before)
    # the judged ratio: input median / (fit median x held-out ratio); a stats record without the
    # calibration (an older checkpoint) is judged against the fit's median alone
    stats = dict(ae.meta["fit_statistics"])
    fit_q50 = stats["reconstruction_error"]["q50"]
    for record, expected in ((stats, fit_q50 * cal["median_ratio"]), ({**stats, "reconstruction_heldout": None}, fit_q50)):
        mon = drift.DriftMonitor(ae, record)
        mon.update(x[other], ae.compress(x[other]))
        rec = mon.report()["reconstruction_error"]
        assert rec["expected_q50"] == pytest.approx(expected)
        assert rec["median_ratio_expected"] == pytest.approx(rec["input"]["q50"] / expected)
    # PCA and truncation carry a calibration too; a method without a reconstruction carries none
    for type_name in ("pca", "truncate"):
        assert fitted(problem, type_name).meta["fit_statistics"]["reconstruction_heldout"]["median_ratio"] > 0
    assert drift.fit_statistics(new_method("dive", problem.d, problem.k, _dive_hp(), 0),
                                problem.train.docs)["reconstruction_heldout"] is None
