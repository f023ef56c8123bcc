module @capstep_prefill_gpt2 attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<11x8xf32> loc("tok_emb"), %arg1: tensor<6x8xf32> loc("pos_emb"), %arg2: tensor<8xf32> loc("blocks.0.attn_norm"), %arg3: tensor<8xf32> loc("blocks.0.attn_norm_bias"), %arg4: tensor<8x8xf32> loc("blocks.0.attn.wq"), %arg5: tensor<8xf32> loc("blocks.0.attn.bq"), %arg6: tensor<8x8xf32> loc("blocks.0.attn.wk"), %arg7: tensor<8xf32> loc("blocks.0.attn.bk"), %arg8: tensor<8x8xf32> loc("blocks.0.attn.wv"), %arg9: tensor<8xf32> loc("blocks.0.attn.bv"), %arg10: tensor<8x8xf32> loc("blocks.0.attn.wo"), %arg11: tensor<8xf32> loc("blocks.0.attn.bo"), %arg12: tensor<8xf32> loc("blocks.0.mlp_norm"), %arg13: tensor<8xf32> loc("blocks.0.mlp_norm_bias"), %arg14: tensor<8x16xf32> loc("blocks.0.mlp.w1"), %arg15: tensor<16xf32> loc("blocks.0.mlp.b1"), %arg16: tensor<16x8xf32> loc("blocks.0.mlp.w2"), %arg17: tensor<8xf32> loc("blocks.0.mlp.b2"), %arg18: tensor<8xf32> loc("final_norm"), %arg19: tensor<8xf32> loc("final_norm_bias"), %arg20: tensor<1x5xi32> loc("tokens")) -> (tensor<1x1x11xf32> {jax.result_info = "logits"}, tensor<1x2x5x4xf32> {jax.result_info = "k.0"}, tensor<1x2x5x4xf32> {jax.result_info = "v.0"}) {
    %0 = stablehlo.iota dim = 0 : tensor<5xi32>
    %1 = "stablehlo.gather"(%arg1, %0) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<6x8xf32>, tensor<5xi32>) -> tensor<5x8xf32>
    %2 = "stablehlo.gather"(%arg0, %arg20) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<11x8xf32>, tensor<1x5xi32>) -> tensor<1x5x8xf32>
    %3 = stablehlo.broadcast_in_dim %1, dims = [1, 2] : (tensor<5x8xf32>) -> tensor<1x5x8xf32>
    %4 = stablehlo.add %2, %3 : tensor<1x5x8xf32>
    %init5 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %5 = stablehlo.reduce(%4 init: %init5) applies stablehlo.add across dimensions = [2] : (tensor<1x5x8xf32>, tensor<f32>) -> tensor<1x5xf32>
    %6 = stablehlo.reshape %5 : (tensor<1x5xf32>) -> tensor<1x5x1xf32>
    %7 = stablehlo.constant dense<1.250000e-01> : tensor<1x5x1xf32>
    %8 = stablehlo.multiply %6, %7 : tensor<1x5x1xf32>
    %9 = stablehlo.broadcast_in_dim %8, dims = [0, 1, 2] : (tensor<1x5x1xf32>) -> tensor<1x5x8xf32>
    %10 = stablehlo.subtract %4, %9 : tensor<1x5x8xf32>
    %11 = stablehlo.multiply %10, %10 : tensor<1x5x8xf32>
    %init12 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %12 = stablehlo.reduce(%11 init: %init12) applies stablehlo.add across dimensions = [2] : (tensor<1x5x8xf32>, tensor<f32>) -> tensor<1x5xf32>
    %13 = stablehlo.reshape %12 : (tensor<1x5xf32>) -> tensor<1x5x1xf32>
    %14 = stablehlo.constant dense<1.250000e-01> : tensor<1x5x1xf32>
    %15 = stablehlo.multiply %13, %14 : tensor<1x5x1xf32>
    %16 = stablehlo.constant dense<1.000000e-05> : tensor<1x5x1xf32>
    %17 = stablehlo.add %15, %16 : tensor<1x5x1xf32>
    %18 = stablehlo.rsqrt %17 : tensor<1x5x1xf32>
    %19 = stablehlo.broadcast_in_dim %18, dims = [0, 1, 2] : (tensor<1x5x1xf32>) -> tensor<1x5x8xf32>
    %20 = stablehlo.multiply %10, %19 : tensor<1x5x8xf32>
    %21 = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %22 = stablehlo.multiply %20, %21 : tensor<1x5x8xf32>
    %23 = stablehlo.broadcast_in_dim %arg3, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %24 = stablehlo.add %22, %23 : tensor<1x5x8xf32>
    %25 = stablehlo.dot_general %24, %arg8, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x8xf32>) -> tensor<1x5x8xf32>
    %26 = stablehlo.broadcast_in_dim %arg9, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %27 = stablehlo.add %25, %26 : tensor<1x5x8xf32>
    %28 = stablehlo.reshape %27 : (tensor<1x5x8xf32>) -> tensor<1x5x2x4xf32>
    %29 = stablehlo.transpose %28, dims = [0, 2, 1, 3] : (tensor<1x5x2x4xf32>) -> tensor<1x2x5x4xf32>
    %30 = stablehlo.dot_general %24, %arg6, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x8xf32>) -> tensor<1x5x8xf32>
    %31 = stablehlo.broadcast_in_dim %arg7, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %32 = stablehlo.add %30, %31 : tensor<1x5x8xf32>
    %33 = stablehlo.reshape %32 : (tensor<1x5x8xf32>) -> tensor<1x5x2x4xf32>
    %34 = stablehlo.transpose %33, dims = [0, 2, 1, 3] : (tensor<1x5x2x4xf32>) -> tensor<1x2x5x4xf32>
    %35 = stablehlo.dot_general %24, %arg4, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x8xf32>) -> tensor<1x5x8xf32>
    %36 = stablehlo.broadcast_in_dim %arg5, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %37 = stablehlo.add %35, %36 : tensor<1x5x8xf32>
    %38 = stablehlo.reshape %37 : (tensor<1x5x8xf32>) -> tensor<1x5x2x4xf32>
    %39 = stablehlo.transpose %38, dims = [0, 2, 1, 3] : (tensor<1x5x2x4xf32>) -> tensor<1x2x5x4xf32>
    %40 = stablehlo.dot_general %39, %34, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3], precision = [DEFAULT, DEFAULT] : (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x5xf32>
    %41 = stablehlo.iota dim = 0 : tensor<5x5xi32>
    %42 = stablehlo.iota dim = 1 : tensor<5x5xi32>
    %43 = stablehlo.compare GT, %42, %41, SIGNED : (tensor<5x5xi32>, tensor<5x5xi32>) -> tensor<5x5xi1>
    %44 = stablehlo.constant dense<0.000000e+00> : tensor<5x5xf32>
    %45 = stablehlo.constant dense<-1.000000e+09> : tensor<5x5xf32>
    %46 = stablehlo.select %43, %45, %44 : tensor<5x5xi1>, tensor<5x5xf32>
    %47 = stablehlo.constant dense<5.000000e-01> : tensor<1x2x5x5xf32>
    %48 = stablehlo.multiply %40, %47 : tensor<1x2x5x5xf32>
    %49 = stablehlo.broadcast_in_dim %46, dims = [2, 3] : (tensor<5x5xf32>) -> tensor<1x2x5x5xf32>
    %50 = stablehlo.add %48, %49 : tensor<1x2x5x5xf32>
    %init51 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %51 = stablehlo.reduce(%50 init: %init51) applies stablehlo.maximum across dimensions = [3] : (tensor<1x2x5x5xf32>, tensor<f32>) -> tensor<1x2x5xf32>
    %52 = stablehlo.broadcast_in_dim %51, dims = [0, 1, 2] : (tensor<1x2x5xf32>) -> tensor<1x2x5x5xf32>
    %53 = stablehlo.subtract %50, %52 : tensor<1x2x5x5xf32>
    %54 = stablehlo.exponential %53 : tensor<1x2x5x5xf32>
    %init55 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %55 = stablehlo.reduce(%54 init: %init55) applies stablehlo.add across dimensions = [3] : (tensor<1x2x5x5xf32>, tensor<f32>) -> tensor<1x2x5xf32>
    %56 = stablehlo.broadcast_in_dim %55, dims = [0, 1, 2] : (tensor<1x2x5xf32>) -> tensor<1x2x5x5xf32>
    %57 = stablehlo.divide %54, %56 : tensor<1x2x5x5xf32>
    %58 = stablehlo.dot_general %57, %29, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<1x2x5x5xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x4xf32>
    %59 = stablehlo.transpose %58, dims = [0, 2, 1, 3] : (tensor<1x2x5x4xf32>) -> tensor<1x5x2x4xf32>
    %60 = stablehlo.reshape %59 : (tensor<1x5x2x4xf32>) -> tensor<1x5x8xf32>
    %61 = stablehlo.dot_general %60, %arg10, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x8xf32>) -> tensor<1x5x8xf32>
    %62 = stablehlo.broadcast_in_dim %arg11, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %63 = stablehlo.add %61, %62 : tensor<1x5x8xf32>
    %64 = stablehlo.add %4, %63 : tensor<1x5x8xf32>
    %init65 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %65 = stablehlo.reduce(%64 init: %init65) applies stablehlo.add across dimensions = [2] : (tensor<1x5x8xf32>, tensor<f32>) -> tensor<1x5xf32>
    %66 = stablehlo.reshape %65 : (tensor<1x5xf32>) -> tensor<1x5x1xf32>
    %67 = stablehlo.constant dense<1.250000e-01> : tensor<1x5x1xf32>
    %68 = stablehlo.multiply %66, %67 : tensor<1x5x1xf32>
    %69 = stablehlo.broadcast_in_dim %68, dims = [0, 1, 2] : (tensor<1x5x1xf32>) -> tensor<1x5x8xf32>
    %70 = stablehlo.subtract %64, %69 : tensor<1x5x8xf32>
    %71 = stablehlo.multiply %70, %70 : tensor<1x5x8xf32>
    %init72 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %72 = stablehlo.reduce(%71 init: %init72) applies stablehlo.add across dimensions = [2] : (tensor<1x5x8xf32>, tensor<f32>) -> tensor<1x5xf32>
    %73 = stablehlo.reshape %72 : (tensor<1x5xf32>) -> tensor<1x5x1xf32>
    %74 = stablehlo.constant dense<1.250000e-01> : tensor<1x5x1xf32>
    %75 = stablehlo.multiply %73, %74 : tensor<1x5x1xf32>
    %76 = stablehlo.constant dense<1.000000e-05> : tensor<1x5x1xf32>
    %77 = stablehlo.add %75, %76 : tensor<1x5x1xf32>
    %78 = stablehlo.rsqrt %77 : tensor<1x5x1xf32>
    %79 = stablehlo.broadcast_in_dim %78, dims = [0, 1, 2] : (tensor<1x5x1xf32>) -> tensor<1x5x8xf32>
    %80 = stablehlo.multiply %70, %79 : tensor<1x5x8xf32>
    %81 = stablehlo.broadcast_in_dim %arg12, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %82 = stablehlo.multiply %80, %81 : tensor<1x5x8xf32>
    %83 = stablehlo.broadcast_in_dim %arg13, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %84 = stablehlo.add %82, %83 : tensor<1x5x8xf32>
    %85 = stablehlo.dot_general %84, %arg14, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x16xf32>) -> tensor<1x5x16xf32>
    %86 = stablehlo.broadcast_in_dim %arg15, dims = [2] : (tensor<16xf32>) -> tensor<1x5x16xf32>
    %87 = stablehlo.add %85, %86 : tensor<1x5x16xf32>
    %88 = stablehlo.multiply %87, %87 : tensor<1x5x16xf32>
    %89 = stablehlo.multiply %88, %87 : tensor<1x5x16xf32>
    %90 = stablehlo.constant dense<4.471500e-02> : tensor<1x5x16xf32>
    %91 = stablehlo.multiply %89, %90 : tensor<1x5x16xf32>
    %92 = stablehlo.add %87, %91 : tensor<1x5x16xf32>
    %93 = stablehlo.constant dense<7.978846e-01> : tensor<1x5x16xf32>
    %94 = stablehlo.multiply %92, %93 : tensor<1x5x16xf32>
    %95 = stablehlo.tanh %94 : tensor<1x5x16xf32>
    %96 = stablehlo.constant dense<1.000000e+00> : tensor<1x5x16xf32>
    %97 = stablehlo.add %95, %96 : tensor<1x5x16xf32>
    %98 = stablehlo.constant dense<5.000000e-01> : tensor<1x5x16xf32>
    %99 = stablehlo.multiply %87, %98 : tensor<1x5x16xf32>
    %100 = stablehlo.multiply %99, %97 : tensor<1x5x16xf32>
    %101 = stablehlo.dot_general %100, %arg16, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x16xf32>, tensor<16x8xf32>) -> tensor<1x5x8xf32>
    %102 = stablehlo.broadcast_in_dim %arg17, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %103 = stablehlo.add %101, %102 : tensor<1x5x8xf32>
    %104 = stablehlo.add %64, %103 : tensor<1x5x8xf32>
    %105 = stablehlo.slice %104 [0:1, 4:5, 0:8] : (tensor<1x5x8xf32>) -> tensor<1x1x8xf32>
    %init106 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %106 = stablehlo.reduce(%105 init: %init106) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %107 = stablehlo.reshape %106 : (tensor<1x1xf32>) -> tensor<1x1x1xf32>
    %108 = stablehlo.constant dense<1.250000e-01> : tensor<1x1x1xf32>
    %109 = stablehlo.multiply %107, %108 : tensor<1x1x1xf32>
    %110 = stablehlo.broadcast_in_dim %109, dims = [0, 1, 2] : (tensor<1x1x1xf32>) -> tensor<1x1x8xf32>
    %111 = stablehlo.subtract %105, %110 : tensor<1x1x8xf32>
    %112 = stablehlo.multiply %111, %111 : tensor<1x1x8xf32>
    %init113 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %113 = stablehlo.reduce(%112 init: %init113) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %114 = stablehlo.reshape %113 : (tensor<1x1xf32>) -> tensor<1x1x1xf32>
    %115 = stablehlo.constant dense<1.250000e-01> : tensor<1x1x1xf32>
    %116 = stablehlo.multiply %114, %115 : tensor<1x1x1xf32>
    %117 = stablehlo.constant dense<1.000000e-05> : tensor<1x1x1xf32>
    %118 = stablehlo.add %116, %117 : tensor<1x1x1xf32>
    %119 = stablehlo.rsqrt %118 : tensor<1x1x1xf32>
    %120 = stablehlo.broadcast_in_dim %119, dims = [0, 1, 2] : (tensor<1x1x1xf32>) -> tensor<1x1x8xf32>
    %121 = stablehlo.multiply %111, %120 : tensor<1x1x8xf32>
    %122 = stablehlo.broadcast_in_dim %arg18, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %123 = stablehlo.multiply %121, %122 : tensor<1x1x8xf32>
    %124 = stablehlo.broadcast_in_dim %arg19, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %125 = stablehlo.add %123, %124 : tensor<1x1x8xf32>
    %126 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<11x8xf32>) -> tensor<8x11xf32>
    %127 = stablehlo.dot_general %125, %126, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x11xf32>) -> tensor<1x1x11xf32>
    return %127, %34, %29 : tensor<1x1x11xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>
  }
}
