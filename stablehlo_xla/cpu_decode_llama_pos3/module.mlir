module @capstep_decode_llama_pos3 attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<11x8xf32> loc("tok_emb"), %arg1: tensor<8xf32> loc("blocks.0.attn_norm"), %arg2: tensor<8x8xf32> loc("blocks.0.attn.wq"), %arg3: tensor<8x4xf32> loc("blocks.0.attn.wk"), %arg4: tensor<8x4xf32> loc("blocks.0.attn.wv"), %arg5: tensor<8x8xf32> loc("blocks.0.attn.wo"), %arg6: tensor<8xf32> loc("blocks.0.mlp_norm"), %arg7: tensor<8x16xf32> loc("blocks.0.mlp.w_gate"), %arg8: tensor<8x16xf32> loc("blocks.0.mlp.w_up"), %arg9: tensor<16x8xf32> loc("blocks.0.mlp.w_down"), %arg10: tensor<8xf32> loc("final_norm"), %arg11: tensor<8x11xf32> loc("head"), %arg12: tensor<1x1xi32> loc("token"), %arg13: tensor<1xi32> loc("pos"), %arg14: tensor<1x1x6x4xf32> loc("k_cache.0"), %arg15: tensor<1x1x6x4xf32> loc("v_cache.0")) -> (tensor<1x1x11xf32> {jax.result_info = "logits"}, tensor<1x1x1x4xf32> {jax.result_info = "k.0"}, tensor<1x1x1x4xf32> {jax.result_info = "v.0"}) {
    %0 = "stablehlo.gather"(%arg0, %arg12) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<11x8xf32>, tensor<1x1xi32>) -> tensor<1x1x8xf32>
    %1 = stablehlo.constant dense<"0x0000803F0000803F0000803F0000803F40510A3FB9FC7F3F40510A3FB9FC7F3F3311D5BEE5F27F3F3311D5BEE5F27F3F26707DBF83E27F3F26707DBF83E27F3F305527BF94CB7F3F305527BF94CB7F3F2C3C913E19AE7F3F2C3C913E19AE7F3F"> : tensor<6x4xf32>
    %2 = stablehlo.constant dense<"0x00000000000000000000000000000000A46A573F57D6233CA46A573F57D6233CB7C7683F3ED4A33CB7C7683F3ED4A33CC381103E1FB9F53CC381103E1FB9F53CCFBD41BFDBCB233DCFBD41BFDBCB233D107C75BFF4B64C3D107C75BFF4B64C3D"> : tensor<6x4xf32>
    %3 = "stablehlo.gather"(%1, %arg13) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 4>}> : (tensor<6x4xf32>, tensor<1xi32>) -> tensor<1x4xf32>
    %4 = "stablehlo.gather"(%2, %arg13) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 4>}> : (tensor<6x4xf32>, tensor<1xi32>) -> tensor<1x4xf32>
    %5 = stablehlo.constant dense<[[0.000000e+00, 0.000000e+00, 1.000000e+00, 0.000000e+00], [0.000000e+00, 0.000000e+00, 0.000000e+00, 1.000000e+00], [-1.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, -1.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<4x4xf32>
    %6 = stablehlo.iota dim = 0 : tensor<6xi32>
    %7 = stablehlo.broadcast_in_dim %arg13, dims = [0] : (tensor<1xi32>) -> tensor<6xi32>
    %8 = stablehlo.compare EQ, %6, %7, SIGNED : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi1>
    %9 = stablehlo.broadcast_in_dim %8, dims = [2] : (tensor<6xi1>) -> tensor<1x1x6x4xi1>
    %10 = stablehlo.constant dense<0.000000e+00> : tensor<6xf32>
    %11 = stablehlo.constant dense<-1.000000e+09> : tensor<6xf32>
    %12 = stablehlo.compare GT, %6, %7, SIGNED : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi1>
    %13 = stablehlo.select %12, %11, %10 : tensor<6xi1>, tensor<6xf32>
    %14 = stablehlo.multiply %0, %0 : tensor<1x1x8xf32>
    %init15 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %15 = stablehlo.reduce(%14 init: %init15) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %16 = stablehlo.constant dense<1.250000e-01> : tensor<1x1xf32>
    %17 = stablehlo.multiply %15, %16 : tensor<1x1xf32>
    %18 = stablehlo.constant dense<1.000000e-05> : tensor<1x1xf32>
    %19 = stablehlo.add %17, %18 : tensor<1x1xf32>
    %20 = stablehlo.rsqrt %19 : tensor<1x1xf32>
    %21 = stablehlo.broadcast_in_dim %20, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x1x8xf32>
    %22 = stablehlo.multiply %0, %21 : tensor<1x1x8xf32>
    %23 = stablehlo.broadcast_in_dim %arg1, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %24 = stablehlo.multiply %22, %23 : tensor<1x1x8xf32>
    %25 = stablehlo.dot_general %24, %arg4, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x4xf32>) -> tensor<1x1x4xf32>
    %26 = stablehlo.reshape %25 : (tensor<1x1x4xf32>) -> tensor<1x1x1x4xf32>
    %27 = stablehlo.transpose %26, dims = [0, 2, 1, 3] : (tensor<1x1x1x4xf32>) -> tensor<1x1x1x4xf32>
    %28 = stablehlo.dot_general %24, %arg3, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x4xf32>) -> tensor<1x1x4xf32>
    %29 = stablehlo.reshape %28 : (tensor<1x1x4xf32>) -> tensor<1x1x1x4xf32>
    %30 = stablehlo.transpose %29, dims = [0, 2, 1, 3] : (tensor<1x1x1x4xf32>) -> tensor<1x1x1x4xf32>
    %31 = stablehlo.dot_general %24, %arg2, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
    %32 = stablehlo.reshape %31 : (tensor<1x1x8xf32>) -> tensor<1x1x2x4xf32>
    %33 = stablehlo.transpose %32, dims = [0, 2, 1, 3] : (tensor<1x1x2x4xf32>) -> tensor<1x2x1x4xf32>
    %34 = stablehlo.dot_general %30, %5, contracting_dims = [3] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x1x4xf32>, tensor<4x4xf32>) -> tensor<1x1x1x4xf32>
    %35 = stablehlo.broadcast_in_dim %4, dims = [2, 3] : (tensor<1x4xf32>) -> tensor<1x1x1x4xf32>
    %36 = stablehlo.multiply %34, %35 : tensor<1x1x1x4xf32>
    %37 = stablehlo.broadcast_in_dim %3, dims = [2, 3] : (tensor<1x4xf32>) -> tensor<1x1x1x4xf32>
    %38 = stablehlo.multiply %30, %37 : tensor<1x1x1x4xf32>
    %39 = stablehlo.add %38, %36 : tensor<1x1x1x4xf32>
    %40 = stablehlo.dot_general %33, %5, contracting_dims = [3] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x2x1x4xf32>, tensor<4x4xf32>) -> tensor<1x2x1x4xf32>
    %41 = stablehlo.broadcast_in_dim %4, dims = [2, 3] : (tensor<1x4xf32>) -> tensor<1x2x1x4xf32>
    %42 = stablehlo.multiply %40, %41 : tensor<1x2x1x4xf32>
    %43 = stablehlo.broadcast_in_dim %3, dims = [2, 3] : (tensor<1x4xf32>) -> tensor<1x2x1x4xf32>
    %44 = stablehlo.multiply %33, %43 : tensor<1x2x1x4xf32>
    %45 = stablehlo.add %44, %42 : tensor<1x2x1x4xf32>
    %46 = stablehlo.broadcast_in_dim %27, dims = [0, 1, 2, 3] : (tensor<1x1x1x4xf32>) -> tensor<1x1x6x4xf32>
    %47 = stablehlo.select %9, %46, %arg15 : tensor<1x1x6x4xi1>, tensor<1x1x6x4xf32>
    %48 = stablehlo.broadcast_in_dim %47, dims = [0, 1, 3, 4] : (tensor<1x1x6x4xf32>) -> tensor<1x1x2x6x4xf32>
    %49 = stablehlo.reshape %48 : (tensor<1x1x2x6x4xf32>) -> tensor<1x2x6x4xf32>
    %50 = stablehlo.broadcast_in_dim %39, dims = [0, 1, 2, 3] : (tensor<1x1x1x4xf32>) -> tensor<1x1x6x4xf32>
    %51 = stablehlo.select %9, %50, %arg14 : tensor<1x1x6x4xi1>, tensor<1x1x6x4xf32>
    %52 = stablehlo.broadcast_in_dim %51, dims = [0, 1, 3, 4] : (tensor<1x1x6x4xf32>) -> tensor<1x1x2x6x4xf32>
    %53 = stablehlo.reshape %52 : (tensor<1x1x2x6x4xf32>) -> tensor<1x2x6x4xf32>
    %54 = stablehlo.transpose %53, dims = [0, 1, 3, 2] : (tensor<1x2x6x4xf32>) -> tensor<1x2x4x6xf32>
    %55 = stablehlo.dot_general %45, %54, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<1x2x1x4xf32>, tensor<1x2x4x6xf32>) -> tensor<1x2x1x6xf32>
    %56 = stablehlo.constant dense<5.000000e-01> : tensor<1x2x1x6xf32>
    %57 = stablehlo.multiply %55, %56 : tensor<1x2x1x6xf32>
    %58 = stablehlo.broadcast_in_dim %13, dims = [3] : (tensor<6xf32>) -> tensor<1x2x1x6xf32>
    %59 = stablehlo.add %57, %58 : tensor<1x2x1x6xf32>
    %init60 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %60 = stablehlo.reduce(%59 init: %init60) applies stablehlo.maximum across dimensions = [3] : (tensor<1x2x1x6xf32>, tensor<f32>) -> tensor<1x2x1xf32>
    %61 = stablehlo.broadcast_in_dim %60, dims = [0, 1, 2] : (tensor<1x2x1xf32>) -> tensor<1x2x1x6xf32>
    %62 = stablehlo.subtract %59, %61 : tensor<1x2x1x6xf32>
    %63 = stablehlo.exponential %62 : tensor<1x2x1x6xf32>
    %init64 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %64 = stablehlo.reduce(%63 init: %init64) applies stablehlo.add across dimensions = [3] : (tensor<1x2x1x6xf32>, tensor<f32>) -> tensor<1x2x1xf32>
    %65 = stablehlo.broadcast_in_dim %64, dims = [0, 1, 2] : (tensor<1x2x1xf32>) -> tensor<1x2x1x6xf32>
    %66 = stablehlo.divide %63, %65 : tensor<1x2x1x6xf32>
    %67 = stablehlo.dot_general %66, %49, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<1x2x1x6xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x1x4xf32>
    %68 = stablehlo.transpose %67, dims = [0, 2, 1, 3] : (tensor<1x2x1x4xf32>) -> tensor<1x1x2x4xf32>
    %69 = stablehlo.reshape %68 : (tensor<1x1x2x4xf32>) -> tensor<1x1x8xf32>
    %70 = stablehlo.dot_general %69, %arg5, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x8xf32>) -> tensor<1x1x8xf32>
    %71 = stablehlo.add %0, %70 : tensor<1x1x8xf32>
    %72 = stablehlo.multiply %71, %71 : tensor<1x1x8xf32>
    %init73 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %73 = stablehlo.reduce(%72 init: %init73) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %74 = stablehlo.constant dense<1.250000e-01> : tensor<1x1xf32>
    %75 = stablehlo.multiply %73, %74 : tensor<1x1xf32>
    %76 = stablehlo.constant dense<1.000000e-05> : tensor<1x1xf32>
    %77 = stablehlo.add %75, %76 : tensor<1x1xf32>
    %78 = stablehlo.rsqrt %77 : tensor<1x1xf32>
    %79 = stablehlo.broadcast_in_dim %78, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x1x8xf32>
    %80 = stablehlo.multiply %71, %79 : tensor<1x1x8xf32>
    %81 = stablehlo.broadcast_in_dim %arg6, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %82 = stablehlo.multiply %80, %81 : tensor<1x1x8xf32>
    %83 = stablehlo.dot_general %82, %arg8, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
    %84 = stablehlo.dot_general %82, %arg7, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x16xf32>) -> tensor<1x1x16xf32>
    %85 = stablehlo.constant dense<-8.000000e+01> : tensor<1x1x16xf32>
    %86 = stablehlo.maximum %84, %85 : tensor<1x1x16xf32>
    %87 = stablehlo.negate %86 : tensor<1x1x16xf32>
    %88 = stablehlo.exponential %87 : tensor<1x1x16xf32>
    %89 = stablehlo.constant dense<1.000000e+00> : tensor<1x1x16xf32>
    %90 = stablehlo.add %88, %89 : tensor<1x1x16xf32>
    %91 = stablehlo.divide %84, %90 : tensor<1x1x16xf32>
    %92 = stablehlo.multiply %91, %83 : tensor<1x1x16xf32>
    %93 = stablehlo.dot_general %92, %arg9, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x16xf32>, tensor<16x8xf32>) -> tensor<1x1x8xf32>
    %94 = stablehlo.add %71, %93 : tensor<1x1x8xf32>
    %95 = stablehlo.multiply %94, %94 : tensor<1x1x8xf32>
    %init96 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %96 = stablehlo.reduce(%95 init: %init96) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %97 = stablehlo.constant dense<1.250000e-01> : tensor<1x1xf32>
    %98 = stablehlo.multiply %96, %97 : tensor<1x1xf32>
    %99 = stablehlo.constant dense<1.000000e-05> : tensor<1x1xf32>
    %100 = stablehlo.add %98, %99 : tensor<1x1xf32>
    %101 = stablehlo.rsqrt %100 : tensor<1x1xf32>
    %102 = stablehlo.broadcast_in_dim %101, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x1x8xf32>
    %103 = stablehlo.multiply %94, %102 : tensor<1x1x8xf32>
    %104 = stablehlo.broadcast_in_dim %arg10, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %105 = stablehlo.multiply %103, %104 : tensor<1x1x8xf32>
    %106 = stablehlo.dot_general %105, %arg11, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x11xf32>) -> tensor<1x1x11xf32>
    return %106, %39, %27 : tensor<1x1x11xf32>, tensor<1x1x1x4xf32>, tensor<1x1x1x4xf32>
  }
}
