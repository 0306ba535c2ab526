// The stand-in libraries' symbols (C linkage: the link needs only the names; nothing calls them on CPU).
#define STUB(name) extern "C" int name() { return 0; }
#if defined(STUB_CUBLAS)
STUB(cublasCreate_v2) STUB(cublasDestroy_v2) STUB(cublasSetStream_v2) STUB(cublasSetMathMode) STUB(cublasSgemm_v2)
#elif defined(STUB_CUBLASLT)
STUB(cublasLtCreate) STUB(cublasLtMatmulDescCreate) STUB(cublasLtMatmulDescDestroy) STUB(cublasLtMatmulDescSetAttribute)
STUB(cublasLtMatrixLayoutCreate) STUB(cublasLtMatrixLayoutDestroy) STUB(cublasLtMatmulPreferenceCreate)
STUB(cublasLtMatmulPreferenceDestroy) STUB(cublasLtMatmulPreferenceSetAttribute) STUB(cublasLtMatmulAlgoGetHeuristic)
STUB(cublasLtMatmul)
#elif defined(STUB_CUDNN)
STUB(cudnnCreate) STUB(cudnnSetStream) STUB(cudnnGetErrorString) STUB(cudnnCreateTensorDescriptor)
STUB(cudnnDestroyTensorDescriptor) STUB(cudnnSetTensor4dDescriptor) STUB(cudnnCreateFilterDescriptor)
STUB(cudnnDestroyFilterDescriptor) STUB(cudnnSetFilter4dDescriptor) STUB(cudnnCreateConvolutionDescriptor)
STUB(cudnnDestroyConvolutionDescriptor) STUB(cudnnSetConvolution2dDescriptor) STUB(cudnnSetConvolutionMathType)
STUB(cudnnGetConvolutionForwardAlgorithm_v7) STUB(cudnnGetConvolutionForwardWorkspaceSize)
STUB(cudnnConvolutionForward)
#endif
