// Everything in hg::data: the IDX reader, (Fashion-)MNIST, DataLoader, DistributedSampler.
#pragma once
#include "data/idx.h"
#include "data/loader.h"
#include "data/mnist.h"
#include "data/sampler.h"
