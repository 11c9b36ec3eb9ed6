"""The disease model every cohort shares: latent signals per patient, the lab network's
blood tests and the imaging centre's radiomic features that measure them, and the diagnosis.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["HOSPITAL_FEATURES", "IMAGING_FEATURES", "LABEL", "LAB_FEATURES"]

LAB_FEATURES = [
    "crp_mg_l",
    "wbc_10e9_l",
    "haemoglobin_g_dl",
    "platelets_10e9_l",
    "albumin_g_l",
    "ldh_u_l",
    "creatinine_umol_l",
    "glucose_mmol_l",
    "hba1c_pct",
    "alt_u_l",
]
"""The lab network's features (blood tests, in the units their names end with)."""

IMAGING_FEATURES = [
    "lesion_volume_cm3",
    "lesion_diameter_mm",
    "lesion_count",
    "suv_max",
    "adc_mean_1e3_mm2_s",
    "enhancement_ratio",
    "margin_irregularity",
    "sphericity",
    "texture_entropy",
    "texture_contrast",
    "texture_homogeneity",
    "mean_intensity_hu",
    "edema_volume_cm3",
    "necrosis_fraction",
    "scanner_noise_hu",
]
"""The imaging centre's imaging-derived (radiomic) features."""

LABEL = "diagnosis"
"""The binary outcome, held by the imaging centre (1 = disease confirmed)."""

HOSPITAL_FEATURES = [*LAB_FEATURES, *IMAGING_FEATURES]
"""The features every hospital of :func:`make_hospital_cohort` holds (lab, then imaging)."""


def draw_signals(people: pd.DataFrame, rng: np.random.Generator) -> dict[str, np.ndarray[Any, Any]]:
    n = len(people)
    return {
        "lab": rng.standard_normal(n),  # inflammation / tissue damage
        "metabolic": rng.standard_normal(n),  # nuisance for the outcome
        "imaging": rng.standard_normal(n),  # lesion burden
        "texture": rng.standard_normal(n),  # heterogeneity, weakly tied to the outcome
        "scanner": rng.standard_normal(n),  # acquisition effect
        "age": (people["age"].to_numpy() - 54.0) / 20.0,
        "male": (people["sex"] == "M").to_numpy().astype(float),
    }


def draw_lab_features(
    people: pd.DataFrame, s: dict[str, np.ndarray[Any, Any]], rng: np.random.Generator
) -> pd.DataFrame:
    n = len(people)

    def noise(scale: float) -> np.ndarray[Any, Any]:
        return scale * rng.standard_normal(n)

    lab = s["lab"]
    cols = {
        "crp_mg_l": np.exp(1.2 + 0.7 * lab + noise(0.6)),
        "wbc_10e9_l": 7.0 + 1.3 * lab + noise(1.4),
        "haemoglobin_g_dl": 14.2 - 0.7 * lab + 1.1 * s["male"] + noise(1.0),
        "platelets_10e9_l": 260 + 35 * lab + noise(55),
        "albumin_g_l": 41 - 2.2 * lab + noise(3.0),
        "ldh_u_l": 210 + 45 * lab + noise(50),
        "creatinine_umol_l": 78 + 14 * s["male"] + 8 * s["age"] + noise(14),
        "glucose_mmol_l": 5.4 + 0.5 * s["metabolic"] + 0.2 * s["age"] + noise(0.5),
        "hba1c_pct": 5.6 + 0.35 * s["metabolic"] + noise(0.3),
        "alt_u_l": np.exp(3.2 + 0.15 * s["metabolic"] + noise(0.4)),
    }
    decimals = {"platelets_10e9_l": 0, "ldh_u_l": 0, "creatinine_umol_l": 0, "alt_u_l": 0}
    frame: pd.DataFrame = pd.DataFrame(
        {k: np.round(v, decimals.get(k, 2)) for k, v in cols.items()}
    )
    return frame


def draw_imaging_features(
    people: pd.DataFrame, s: dict[str, np.ndarray[Any, Any]], rng: np.random.Generator
) -> tuple[pd.DataFrame, np.ndarray[Any, Any]]:
    n = len(people)

    def noise(scale: float) -> np.ndarray[Any, Any]:
        return scale * rng.standard_normal(n)

    img, tex, scanner = s["imaging"], s["texture"], s["scanner"]
    volume = np.exp(1.5 + 0.6 * img + noise(0.5))
    cols = {
        "lesion_volume_cm3": volume,
        "lesion_diameter_mm": 10 * np.cbrt(6 * volume / np.pi) * np.exp(noise(0.08)),
        "lesion_count": rng.poisson(np.exp(0.3 + 0.35 * img)).astype(float),
        "suv_max": np.exp(1.3 + 0.3 * img + 0.1 * tex + noise(0.3)),
        "adc_mean_1e3_mm2_s": 1.3 - 0.12 * img + noise(0.15),
        "enhancement_ratio": 1.6 + 0.2 * img + 0.05 * scanner + noise(0.25),
        "margin_irregularity": 1 / (1 + np.exp(-(0.8 * img + 0.4 * tex + noise(0.8)))),
        "sphericity": 0.8 - 0.05 * img + noise(0.06),
        "texture_entropy": 4.5 + 0.4 * tex + 0.2 * img + 0.2 * scanner + noise(0.35),
        "texture_contrast": np.exp(2.0 + 0.3 * tex + 0.15 * scanner + noise(0.3)),
        "texture_homogeneity": 0.55 - 0.06 * tex + noise(0.05),
        "mean_intensity_hu": 40 + 6 * img + 8 * scanner + noise(8),
        "edema_volume_cm3": np.exp(1.0 + 0.5 * img + noise(0.7)),
        "necrosis_fraction": 1 / (1 + np.exp(-(-2.0 + 0.6 * img + noise(0.6)))),
        "scanner_noise_hu": 12 + 3 * scanner + noise(1.0),
    }
    logit = -1.05 + 1.5 * s["lab"] + 1.6 * img + 0.35 * tex + 0.3 * s["age"]
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    decimals = {"lesion_count": 0, "mean_intensity_hu": 1, "scanner_noise_hu": 1}
    frame = pd.DataFrame({k: np.round(v, decimals.get(k, 3)) for k, v in cols.items()})
    return frame, label
