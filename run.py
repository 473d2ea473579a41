"""Run one cell, or a grid of cells with -m (the same command as the `selfpref-sweep` console script):

    python run.py                                   # qwen05 vs human summaries on the demo data
    python run.py -m experiment=smoke               # a preset grid from conf/experiment/
    python run.py -m source=human,smollm135 dataset=paper_xsum dataset.root=../shared/paper-data
"""

from selfpref_sweep.cli import main

if __name__ == "__main__":
    main()
