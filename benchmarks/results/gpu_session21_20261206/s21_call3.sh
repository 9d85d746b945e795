# session 21, call 3: the CUDA tests with the observation standardised, then two more seeds of the bare command
L=$OUT/spike_check.log; source .devtools/s14_lib.sh
step cuda_tests timeout 170 python3 -m pytest -q -x -p no:cacheprovider tests/test_learner_cuda.py
tail -3 $L
export SKIP_UPDATE=1
bash .devtools/s18_call1.sh
