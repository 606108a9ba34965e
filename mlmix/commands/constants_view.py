"""The text view of :func:`~mlmix.empirical.model_constants.constants_report.model_constants`'s report, shared by
``mlmix estimate --certify`` (its ``certified`` block) and ``mlmix exact --mlm`` (its ``model_constants`` block):
the brackets of rho, alpha, Delta, T* and R max with their widths shown, Theorem 5's verdict at the temperature and
the temperature above which it provably applies."""

from __future__ import annotations

from mlmix.theory.results import bracket_text, outward_text


def threshold_line(threshold: dict) -> str:
    """The one line of :func:`~mlmix.empirical.model_constants.certify.theorem5_threshold`: above which
    temperature Theorem 5 provably applies, or why it cannot be certified."""
    T = threshold["temperature"]
    if T is None:
        return f"Theorem 5 at any temperature: {threshold['why']}"
    return (f"Theorem 5 provably applies at every T >= {outward_text(T, 7, down=False)} "
            f"({threshold['why']}; {threshold['method']})")


def certified_lines(cert: dict) -> list[str]:
    """The lines of a report's JSON form (``ModelConstants.as_dict()``): a heading with the method and the passes,
    one bracket a constant, Theorem 5's verdict and its threshold line."""
    lines = [f"certified over every context ({cert['method']}; {cert['passes']:,} passes):"]
    for name in ("rho", "alpha", "delta", "contraction_temperature", "rectangle"):
        r = cert.get(name)
        if r is not None:
            lines.append(f"  {'R max' if name == 'rectangle' else name:<26}{bracket_text(r.lower, r.upper)}")
    lines.append(f"  Theorem 5 at T = {cert['temperature']:g}: {cert['theorem5']['verdict']} "
                 f"({cert['theorem5']['why']})")
    lines.append(f"  {threshold_line(cert['theorem5_threshold'])}")
    return lines
