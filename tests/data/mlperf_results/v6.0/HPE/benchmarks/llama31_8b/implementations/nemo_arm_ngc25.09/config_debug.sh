export NCCL_TEST=1
export NCCL_LLM_TEST=1

#TODO add more unit tests including cublas command lines.
