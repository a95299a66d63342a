"""A stand-in for PyTorch where there is none (CI): just enough of Dynamo's backend registry
for the tests of how the kiln backend registers. Not PyTorch's code."""
