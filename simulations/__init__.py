"""The scenario catalogue of ``kraft sim``, installed with kraft as ``kraft_simulations``.

``kraft.simulation.scenario.load_scenarios`` imports each module of this directory by its path
(files whose names start with ``_`` are skipped); see README.md here and docs/simulation.md.
"""
